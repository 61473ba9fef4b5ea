//! Why the interposer records nothing of a process's NIXL calls (the
//! `reason` of `nixl_agent_interposer_blind`): what it could not prove on
//! the loaded NIXL. Closed: the text beside it names the details.

/// What the interposer could not prove on the NIXL loaded in a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Blind {
    /// No loaded object defines NIXL's `nixlAgent`.
    NoNixl,
    /// The loaded NIXL does not define a method the interposer hooks
    /// under the name it hooks.
    UndefinedMethods,
    /// The loaded NIXL does not export what the layout self-test builds
    /// with.
    NoSelfTest,
    /// What NIXL's own code built did not read back as the interposer
    /// reads the program's objects.
    LayoutMismatch,
}

impl Blind {
    pub const ALL: [Blind; 4] = [
        Blind::NoNixl,
        Blind::UndefinedMethods,
        Blind::NoSelfTest,
        Blind::LayoutMismatch,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Blind::NoNixl => "no_nixl",
            Blind::UndefinedMethods => "undefined_methods",
            Blind::NoSelfTest => "no_self_test",
            Blind::LayoutMismatch => "layout_mismatch",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_and_the_label_agree() {
        for r in Blind::ALL {
            assert_eq!(serde_json::to_string(&r).unwrap(), format!("\"{}\"", r.as_str()));
        }
    }
}
