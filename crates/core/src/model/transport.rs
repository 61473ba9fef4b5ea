//! Which transport a peer's transfers take: UCX's endpoint scope and the
//! transports of the lanes it picked (`UCX_PROTO_INFO=y`), as closed label
//! values. UCX's own names are many and grow; the ones that matter for
//! telling a fall-back from the fast path are named, the rest are `other`.

use std::fmt;

/// Where the peer is, as UCX sees the endpoint: the `scope` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum TransportScope {
    /// The agent's own endpoint (a loopback to itself).
    #[serde(rename = "self")]
    Local,
    #[serde(rename = "intra-node")]
    IntraNode,
    #[serde(rename = "inter-node")]
    InterNode,
}

impl TransportScope {
    pub const ALL: [TransportScope; 3] = [
        TransportScope::Local,
        TransportScope::IntraNode,
        TransportScope::InterNode,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            TransportScope::Local => "self",
            TransportScope::IntraNode => "intra-node",
            TransportScope::InterNode => "inter-node",
        }
    }

    /// UCX's word in a protocol table's title.
    pub fn parse(word: &str) -> Option<TransportScope> {
        TransportScope::ALL.into_iter().find(|s| s.as_str() == word)
    }
}

impl fmt::Display for TransportScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A UCX transport: the `transport` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    Tcp,
    Cma,
    Knem,
    Xpmem,
    Sysv,
    Posix,
    CudaIpc,
    CudaCopy,
    GdrCopy,
    RcMlx5,
    RcVerbs,
    DcMlx5,
    UdMlx5,
    UdVerbs,
    Srd,
    /// UCX's loopback transport (`self`).
    #[serde(rename = "self")]
    Loopback,
    Other,
}

impl Transport {
    pub const ALL: [Transport; 17] = [
        Transport::Tcp,
        Transport::Cma,
        Transport::Knem,
        Transport::Xpmem,
        Transport::Sysv,
        Transport::Posix,
        Transport::CudaIpc,
        Transport::CudaCopy,
        Transport::GdrCopy,
        Transport::RcMlx5,
        Transport::RcVerbs,
        Transport::DcMlx5,
        Transport::UdMlx5,
        Transport::UdVerbs,
        Transport::Srd,
        Transport::Loopback,
        Transport::Other,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Cma => "cma",
            Transport::Knem => "knem",
            Transport::Xpmem => "xpmem",
            Transport::Sysv => "sysv",
            Transport::Posix => "posix",
            Transport::CudaIpc => "cuda_ipc",
            Transport::CudaCopy => "cuda_copy",
            Transport::GdrCopy => "gdr_copy",
            Transport::RcMlx5 => "rc_mlx5",
            Transport::RcVerbs => "rc_verbs",
            Transport::DcMlx5 => "dc_mlx5",
            Transport::UdMlx5 => "ud_mlx5",
            Transport::UdVerbs => "ud_verbs",
            Transport::Srd => "srd",
            Transport::Loopback => "self",
            Transport::Other => "other",
        }
    }

    /// UCX's name of a transport (the part of a lane before `/`); a name
    /// not in the closed set is `Other`.
    pub fn of_ucx(name: &str) -> Transport {
        let name = name.trim();
        // UCX's old names of the accelerated (mlx5) transports.
        let name = match name {
            "rc_x" => "rc_mlx5",
            "dc_x" => "dc_mlx5",
            "ud_x" => "ud_mlx5",
            other => other,
        };
        Transport::ALL
            .into_iter()
            .find(|t| *t != Transport::Other && t.as_str() == name)
            .unwrap_or(Transport::Other)
    }

    /// TCP: the fall-back when shared memory, CUDA IPC or RDMA cannot serve.
    pub const fn is_tcp(self) -> bool {
        matches!(self, Transport::Tcp)
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ucx_names_map_into_the_closed_set() {
        assert_eq!(Transport::of_ucx("tcp"), Transport::Tcp);
        assert_eq!(Transport::of_ucx("cma"), Transport::Cma);
        assert_eq!(Transport::of_ucx("rc_x"), Transport::RcMlx5);
        assert_eq!(Transport::of_ucx("cuda_ipc"), Transport::CudaIpc);
        assert_eq!(Transport::of_ucx("self"), Transport::Loopback);
        assert_eq!(Transport::of_ucx("a_new_one"), Transport::Other);
        assert_eq!(TransportScope::parse("intra-node"), Some(TransportScope::IntraNode));
        assert_eq!(TransportScope::parse("cfg#1"), None);
        for t in Transport::ALL {
            assert_eq!(serde_json::to_string(&t).unwrap(), format!("\"{}\"", t.as_str()));
        }
    }
}
