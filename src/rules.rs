//! The Prometheus alerting rules, rendered for the operator's scrape
//! selector and runbook location (`nixl-agent rules`), in the manner of
//! monitoring-mixins. `alerts/nixl-agent.rules.yml` is the rendering with
//! [`DEFAULT_SELECTOR`] and [`DEFAULT_RUNBOOK_URL_BASE`] (tests/alerts.rs
//! keeps them equal).

use thiserror::Error;

/// The rules, with `__SELECTOR__` and `__RUNBOOK_URL_BASE__` to fill in.
pub const TEMPLATE: &str = include_str!("rules/template.yml");
/// The scrape job of a standalone agent.
pub const DEFAULT_SELECTOR: &str = r#"job="nixl-agent""#;
/// Where docs/runbooks.md of this repository is published.
pub const DEFAULT_RUNBOOK_URL_BASE: &str = "https://github.com/nixl-agent/nixl-agent/blob/main/docs/runbooks.md";

#[derive(Debug, Error, PartialEq, Eq)]
pub enum RulesError {
    #[error("--selector `{0}`: {1}")]
    Selector(String, &'static str),
    #[error("--runbook-url-base `{0}`: {1}")]
    RunbookUrl(String, &'static str),
}

/// The rules for `selector` (label matchers, as inside `{}`: `job="x"`,
/// `job=~"sglang.*",namespace="prod"`) with runbook links under `base`
/// (`base#alertname`).
pub fn render(selector: &str, base: &str) -> Result<String, RulesError> {
    check_selector(selector)?;
    check_base(base)?;
    Ok(TEMPLATE
        .replace("__SELECTOR__", selector.trim())
        .replace("__RUNBOOK_URL_BASE__", base.trim_end_matches('/')))
}

fn check_base(base: &str) -> Result<(), RulesError> {
    let bad = |why| Err(RulesError::RunbookUrl(base.to_string(), why));
    if !(base.starts_with("https://") || base.starts_with("http://")) {
        return bad("must be an absolute http(s) URL (a relative link is dead in Alertmanager, PagerDuty and Slack)");
    }
    if base.contains(|c: char| c.is_whitespace() || c == '#' || c == '"' || c == '\'') {
        return bad("must not contain whitespace, quotes or a fragment (#)");
    }
    Ok(())
}

/// Accepts `name op "value"` matchers separated by commas, op one of
/// `=`, `!=`, `=~`, `!~`; the value a double-quoted string.
fn check_selector(sel: &str) -> Result<(), RulesError> {
    let bad = |why| Err(RulesError::Selector(sel.to_string(), why));
    let s = sel.trim();
    if s.is_empty() {
        return bad("is empty: give at least one matcher, e.g. job=\"nixl-agent\"");
    }
    if s.contains(['\n', '{', '}']) {
        return bad("takes matchers without braces, on one line");
    }
    let mut rest = s;
    loop {
        let name_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if name_len == 0 || rest.as_bytes()[0].is_ascii_digit() {
            return bad("each matcher starts with a label name");
        }
        rest = rest[name_len..].trim_start();
        let op = ["=~", "!~", "!=", "="].into_iter().find(|op| rest.starts_with(op));
        let Some(op) = op else {
            return bad("each matcher needs one of = != =~ !~");
        };
        rest = rest[op.len()..].trim_start();
        let Some(body) = rest.strip_prefix('"') else {
            return bad("each value is a double-quoted string");
        };
        let mut end = None;
        let mut escaped = false;
        for (i, c) in body.char_indices() {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => {
                    end = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let Some(end) = end else {
            return bad("a value's closing quote is missing");
        };
        rest = body[end + 1..].trim_start();
        if rest.is_empty() {
            return Ok(());
        }
        let Some(next) = rest.strip_prefix(',') else {
            return bad("matchers are separated by commas");
        };
        rest = next.trim_start();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_are_checked() {
        for ok in [
            r#"job="nixl-agent""#,
            r#"job=~"sglang.*", namespace!="dev""#,
            r#"a="x\"y""#,
        ] {
            check_selector(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in [
            "",
            "job",
            r#"{job="x"}"#,
            r#"job="x"#,
            r#"job="x" ns="y""#,
            r#"1a="x""#,
            "job=x",
        ] {
            let e = check_selector(bad).unwrap_err();
            assert!(e.to_string().starts_with("--selector"), "{bad}: {e}");
        }
    }

    #[test]
    fn runbook_base_must_be_absolute() {
        assert!(check_base("docs/runbooks.md").is_err());
        assert!(check_base("https://x/runbooks.md#a").is_err());
        assert!(check_base("https://wiki.example/nixl").is_ok());
    }

    #[test]
    fn rendering_fills_every_placeholder() {
        let r = render(r#"job=~"sglang.*""#, "https://wiki.example/nixl/").unwrap();
        assert!(!r.contains("__"), "placeholder left");
        assert!(r.contains(r#"nixl_agent_ready{job=~"sglang.*"}"#));
        assert!(r.contains("runbook_url: https://wiki.example/nixl#nixlagentdown"));
    }
}
