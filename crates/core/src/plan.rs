//! The registration plan: named groups of memory regions.
//!
//! A serving process that embeds the library hands over its own regions
//! ([`RegionSource::Provided`]); the binary, which owns no serving memory,
//! asks for `count` × `size` regions to be allocated ([`RegionSource::Allocate`]).

use crate::config::{self, Config, ConfigError, GroupConfig};
pub use crate::model::{Kind, MemType, Region};

/// Where a group's regions come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegionSource {
    /// Regions the embedding process owns. It must keep them alive until the
    /// agent has deregistered them (after `AgentHandle::shutdown` returns).
    Provided(Vec<Region>),
    /// `count` regions of `size` bytes each, allocated by the agent (page
    /// aligned, size rounded up to the page size) and freed after drain.
    Allocate { count: usize, size: usize },
}

/// Everything the agent knows about one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSpec {
    pub name: String,
    pub kind: Kind,
    pub mem_type: MemType,
    pub device: u32,
    pub backends: Vec<String>,
    /// Whether readiness depends on this group.
    pub required: bool,
    /// Whether regions are validated before NIXL sees them.
    pub validate: bool,
    pub source: RegionSource,
}

impl GroupSpec {
    /// A required, validated group on the UCX backend with the given regions:
    /// the way a serving process hands its buffers over.
    pub fn provided(name: &str, kind: Kind, mem_type: MemType, regions: Vec<Region>) -> GroupSpec {
        GroupSpec {
            name: name.to_string(),
            kind,
            mem_type,
            device: regions.first().map_or(0, |r| r.device),
            backends: vec![config::DEFAULT_BACKEND.to_string()],
            required: true,
            validate: true,
            source: RegionSource::Provided(regions),
        }
    }

    pub fn with_validate(mut self, validate: bool) -> Self {
        self.validate = validate;
        self
    }

    pub fn with_required(mut self, required: bool) -> Self {
        self.required = required;
        self
    }

    pub fn with_backends(mut self, backends: &[&str]) -> Self {
        self.backends = backends.iter().map(|b| b.to_string()).collect();
        self
    }

    /// The `backend` label: backend names joined with `+` (e.g. "UCX").
    /// The group's label values.
    pub fn labels(&self) -> crate::model::GroupLabels {
        crate::model::GroupLabels::new(&self.name, &self.kind, self.mem_type, &self.backends, self.device)
    }

    pub fn backend_label(&self) -> String {
        self.backends.join("+")
    }

    /// Descriptors and bytes the group will register.
    pub fn totals(&self) -> (usize, u64) {
        match &self.source {
            RegionSource::Provided(r) => (r.len(), r.iter().fold(0u64, |a, r| a.saturating_add(r.len as u64))),
            RegionSource::Allocate { count, size } => (*count, (*count as u64).saturating_mul(*size as u64)),
        }
    }

    fn from_config(g: &GroupConfig) -> GroupSpec {
        GroupSpec {
            name: g.name.clone(),
            kind: Kind::parse(&g.kind),
            mem_type: g.mem_type,
            device: g.device,
            backends: g.backends.clone(),
            required: g.required,
            validate: g.validate,
            // Config validation bounds both by MAX_REGIONS_PER_GROUP and MAX_GROUP_BYTES.
            source: RegionSource::Allocate {
                count: g.count as usize,
                size: g.size as usize,
            },
        }
    }
}

/// The ordered list of groups the agent registers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub groups: Vec<GroupSpec>,
}

impl Plan {
    /// The plan a config file describes (validate the config first).
    pub fn from_config(config: &Config) -> Plan {
        Plan {
            groups: config.groups.iter().map(GroupSpec::from_config).collect(),
        }
    }

    /// Checks the words that become labels and that names are unique: the
    /// same rules as the config file, for plans built through the library.
    pub fn check(&self) -> Result<(), ConfigError> {
        let mut names = std::collections::HashSet::new();
        for (i, g) in self.groups.iter().enumerate() {
            let key = |field: &str| format!("groups[{i}].{field}");
            config::validate_group_words(&g.name, g.kind.as_str(), &g.backends, &key)?;
            if !names.insert(g.name.as_str()) {
                return Err(ConfigError::Invalid {
                    key: key("name"),
                    message: format!("`{}` is used by another group", g.name),
                });
            }
        }
        Ok(())
    }

    /// Every backend any group uses, in first-use order.
    pub fn backends(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for b in self.groups.iter().flat_map(|g| g.backends.iter()) {
            if !out.contains(b) {
                out.push(b.clone());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_plan_keeps_order_and_fields() {
        let plan = Plan::from_config(&Config::default());
        let names: Vec<_> = plan.groups.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["kv", "aux"]);
        assert_eq!(plan.groups[0].kind, Kind::Kv);
        assert_eq!(plan.groups[1].kind, Kind::Aux);
        assert_eq!(plan.backends(), ["UCX"]);
        plan.check().unwrap();
    }

    #[test]
    fn library_plans_are_checked_like_config() {
        let g = |name: &str| GroupSpec::provided(name, Kind::Aux, MemType::Dram, vec![]);
        let plan = Plan {
            groups: vec![g("a"), g("a")],
        };
        assert!(plan.check().unwrap_err().to_string().contains("groups[1].name"));
        let plan = Plan {
            groups: vec![g("bad\"name")],
        };
        assert!(plan.check().unwrap_err().to_string().contains("groups[0].name"));
        let plan = Plan {
            groups: vec![g("x").with_backends(&[])],
        };
        assert!(plan.check().unwrap_err().to_string().contains("backends"));
    }

    #[test]
    fn kinds_round_trip() {
        for w in ["kv", "aux", "state", "mamba_conv"] {
            assert_eq!(Kind::parse(w).as_str(), w);
        }
    }
}
