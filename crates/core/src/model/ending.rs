//! How a rank's process ended, as the pod sees it (the `how` of
//! `nixl_agent_pod_rank_exits_total`, `ranks[].ended` in /v1/status).

/// How a process ended. A process that exits through its interpreter's
/// exit writes an end record saying which of the first two; one that leaves
/// none (a signal, `os._exit`, `abort`, `kill -9`) died.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum How {
    /// A normal interpreter exit (or a publisher stopped by its embedder).
    Exited,
    /// The interpreter exited after an uncaught exception (exit code 1).
    Exception,
    /// No end record: killed by a signal, `os._exit`, `abort`.
    Died,
}

impl How {
    pub const ALL: [How; 3] = [How::Exited, How::Exception, How::Died];

    pub const fn as_str(self) -> &'static str {
        match self {
            How::Exited => "exited",
            How::Exception => "exception",
            How::Died => "died",
        }
    }

    /// In words, for log lines and /readyz?verbose.
    pub const fn describe(self) -> &'static str {
        match self {
            How::Exited => "exited",
            How::Exception => "exited after an uncaught exception (exit code 1)",
            How::Died => "died without an end record (a signal, os._exit, abort or kill -9)",
        }
    }
}

/// A process's end record, written into its rank file as it exits.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Ended {
    pub how: How,
    /// The uncaught exception's type name (at most
    /// [`Ended::MAX_EXCEPTION`] bytes), for [`How::Exception`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exception: Option<String>,
    /// When it ended (Unix seconds).
    pub at_unix: f64,
}

impl Ended {
    /// The longest exception name kept.
    pub const MAX_EXCEPTION: usize = 128;

    /// An end now: `exception` set means the interpreter is exiting after
    /// that uncaught exception.
    pub fn now(exception: Option<&str>) -> Ended {
        let exception = exception.map(|e| {
            let mut cut = e.len().min(Self::MAX_EXCEPTION);
            while !e.is_char_boundary(cut) {
                cut -= 1;
            }
            e[..cut].to_string()
        });
        Ended {
            how: if exception.is_some() {
                How::Exception
            } else {
                How::Exited
            },
            exception,
            at_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        }
    }

    /// In words: `exited`, `exited after an uncaught exception
    /// (nixlBackendError)`.
    pub fn describe(&self) -> String {
        match (&self.how, &self.exception) {
            (How::Exception, Some(e)) => format!("exited after an uncaught exception ({e})"),
            (how, _) => how.describe().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_match_serde_and_exception_names_are_bounded() {
        for h in How::ALL {
            let word = h.as_str();
            assert_eq!(serde_json::to_string(&h).unwrap(), format!("\"{word}\""));
        }
        let e = Ended::now(Some(&"é".repeat(100)));
        assert!(e.exception.as_ref().unwrap().len() <= Ended::MAX_EXCEPTION);
        assert_eq!(e.how, How::Exception);
        assert_eq!(Ended::now(None).how, How::Exited);
    }
}
