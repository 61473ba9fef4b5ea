//! 1c. Plan::check: the gate in front of every label.

use super::*;

// ---------------------------------------------------------------------------
// 1c. Plan::check: the gate in front of every label.

pub(super) fn any_word(valid: BoxedStrategy<String>) -> BoxedStrategy<String> {
    prop_oneof![3 => valid, 2 => hostile_word()].boxed()
}

pub(super) fn any_spec() -> impl Strategy<Value = GroupSpec> {
    (
        prop_oneof![3 => prop::sample::select(vec!["kv", "aux", "a.b"]).prop_map(str::to_string), 2 => any_word(valid_name().boxed())],
        any_word(valid_kind().boxed()),
        prop_oneof![
            6 => prop::collection::vec(any_word(valid_backend().boxed()), 1..3),
            1 => Just(vec![]),
        ],
        any::<bool>(),
    )
        .prop_map(|(name, kind, backends, vram)| {
            let mem = if vram { MemType::Vram } else { MemType::Dram };
            let mut g = GroupSpec::provided(&name, Kind::parse(&kind), mem, vec![]);
            g.backends = backends;
            g
        })
}

/// The key `Plan::check` must name for this plan, or None when it must pass.
pub(super) fn plan_oracle(plan: &Plan) -> Option<String> {
    let mut names = HashSet::new();
    for (i, g) in plan.groups.iter().enumerate() {
        let key = |f: &str| format!("groups[{i}].{f}");
        if !name_ok(&g.name) {
            return Some(key("name"));
        }
        if !kind_ok(g.kind.as_str()) {
            return Some(key("kind"));
        }
        if g.backends.is_empty() || !g.backends.iter().all(|b| backend_ok(b)) {
            return Some(key("backends"));
        }
        if !names.insert(g.name.as_str()) {
            return Some(key("name"));
        }
    }
    None
}

proptest! {
    #![proptest_config(cases(2000))]

    #[test]
    fn plan_check_admits_exactly_the_documented_charsets(groups in prop::collection::vec(any_spec(), 0..5)) {
        let plan = Plan { groups };
        let got = plan.check();
        match (plan_oracle(&plan), &got) {
            (None, Ok(())) => {
                for g in &plan.groups {
                    for w in [g.name.as_str(), g.kind.as_str(), &g.backend_label()] {
                        prop_assert!(!w.contains(LABEL_BREAKERS), "{:?} passed the check", w);
                        prop_assert_eq!(escape(w), w.to_string());
                    }
                }
            }
            (Some(key), Err(ConfigError::Invalid { key: k, .. })) => prop_assert_eq!(k, &key),
            (want, got) => prop_assert!(false, "expected {:?}, got {:?} for {:?}", want, got, plan),
        }
    }
}
