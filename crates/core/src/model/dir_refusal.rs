//! The pod's domain words: why a process will not write a pod directory it
//! was given (the `reason` of `nixl_agent_pod_dir_refused`).

/// Why a pod directory is not written to: the process runs alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DirRefusal {
    /// The path is a symbolic link.
    Link,
    /// The path is something other than a directory.
    NotADirectory,
    /// Another user (neither this process's nor root) owns it.
    NotOwner,
    /// Group or others may write it, it is not sticky, and it is not this
    /// user's to make sticky.
    WritableByOthers,
    /// It cannot be created or looked at.
    Unusable,
}

impl DirRefusal {
    pub const ALL: [DirRefusal; 5] = [
        DirRefusal::Link,
        DirRefusal::NotADirectory,
        DirRefusal::NotOwner,
        DirRefusal::WritableByOthers,
        DirRefusal::Unusable,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            DirRefusal::Link => "link",
            DirRefusal::NotADirectory => "not_a_directory",
            DirRefusal::NotOwner => "not_owner",
            DirRefusal::WritableByOthers => "writable_by_others",
            DirRefusal::Unusable => "unusable",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_and_the_label_agree() {
        for r in DirRefusal::ALL {
            assert_eq!(serde_json::to_string(&r).unwrap(), format!("\"{}\"", r.as_str()));
        }
    }
}
