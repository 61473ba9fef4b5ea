//! 1d. Escaping: label values and help text that contain `"`, `\` and newlines are written so that a parser reads back the exact string.

use super::*;

// ---------------------------------------------------------------------------
// 1d. Escaping: label values and help text that contain `"`, `\` and
// newlines are written so that a parser reads back the exact string.

/// Undoes exposition escaping; `quote` says whether `\"` is an escape.
pub(super) fn unescape(s: &str, quote: bool) -> Result<String, String> {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some('"') if quote => out.push('"'),
            other => return Err(format!("bad escape \\{other:?} in {s:?}")),
        }
    }
    Ok(out)
}

/// One sample line: metric name, labels, and what follows the labels.
#[derive(Debug)]
pub(super) struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: String,
}

/// A strict parser of one exposition sample line (both formats).
pub(super) fn parse_sample(line: &str) -> Result<Sample, String> {
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let name: String = chars
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || **c == '_' || **c == ':')
        .collect();
    if name.is_empty() {
        return Err(format!("no metric name: {line:?}"));
    }
    i += name.len();
    let mut labels = Vec::new();
    if chars.get(i) == Some(&'{') {
        i += 1;
        loop {
            if chars.get(i) == Some(&'}') {
                i += 1;
                break;
            }
            let k: String = chars[i..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
                .collect();
            i += k.len();
            if k.is_empty() || chars.get(i) != Some(&'=') || chars.get(i + 1) != Some(&'"') {
                return Err(format!("bad label at {i}: {line:?}"));
            }
            i += 2;
            let mut raw = String::new();
            loop {
                match chars.get(i) {
                    None => return Err(format!("unterminated label value: {line:?}")),
                    Some('\\') => {
                        raw.push('\\');
                        raw.push(*chars.get(i + 1).ok_or("dangling backslash")?);
                        i += 2;
                    }
                    Some('"') => {
                        i += 1;
                        break;
                    }
                    Some(c) => {
                        raw.push(*c);
                        i += 1;
                    }
                }
            }
            labels.push((k, unescape(&raw, true)?));
            match chars.get(i) {
                Some(',') => i += 1,
                Some('}') => {}
                _ => return Err(format!("expected , or }} at {i}: {line:?}")),
            }
        }
    }
    if chars.get(i) != Some(&' ') {
        return Err(format!("no space before the value: {line:?}"));
    }
    let value: String = chars[i + 1..].iter().collect();
    if value.is_empty() {
        return Err(format!("no value: {line:?}"));
    }
    Ok(Sample { name, labels, value })
}

pub(super) fn label<'a>(s: &'a Sample, name: &str) -> Option<&'a String> {
    s.labels.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

/// Parses a whole exposition body: every line is a comment or a sample.
/// Returns the samples and the HELP texts by family.
pub(super) fn parse_exposition(body: &str, format: Format) -> Result<(Vec<Sample>, BTreeMap<String, String>), String> {
    let mut samples = Vec::new();
    let mut help = BTreeMap::new();
    let om = format == Format::OpenMetrics;
    for line in body.split_terminator('\n') {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (fam, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help.insert(fam.to_string(), unescape(text, om)?);
        } else if line.starts_with("# TYPE ") || line.starts_with("# UNIT ") || line == "# EOF" {
        } else if line.starts_with('#') {
            return Err(format!("unknown comment line {line:?}"));
        } else {
            let mut s = parse_sample(line)?;
            // OpenMetrics exemplars follow the value after " # ".
            if om {
                if let Some((value, _exemplar)) = s.value.split_once(" # ") {
                    s.value = value.to_string();
                }
            }
            samples.push(s);
        }
    }
    if om && !body.ends_with("# EOF\n") {
        return Err("OpenMetrics body does not end with # EOF".into());
    }
    Ok((samples, help))
}

proptest! {
    #![proptest_config(cases(1000))]

    #[test]
    fn escape_is_reversible_and_leaves_no_raw_newline_or_quote(v in ".{0,24}|\\PC{0,24}|[\"\\\\\n a]{0,12}") {
        let e = escape(&v);
        prop_assert!(!e.contains('\n'));
        prop_assert_eq!(unescape(&e, true), Ok(v.clone()));
        // Every quote is escaped: no `"` is preceded by an even run of backslashes.
        let b: Vec<char> = e.chars().collect();
        for (i, c) in b.iter().enumerate() {
            if *c == '"' {
                let run = b[..i].iter().rev().take_while(|c| **c == '\\').count();
                prop_assert!(run % 2 == 1, "unescaped quote in {:?}", e);
            }
        }
    }

    #[test]
    fn hostile_label_values_and_help_survive_both_encoders(
        values in prop::collection::vec("[\"\\\\\n{},= a#é]{0,10}|\\PC{0,10}", 1..4),
        help in "[\"\\\\\n a]{1,12}|\\PC{1,12}",
    ) {
        let r = prometheus::Registry::new();
        let c = prometheus::IntCounterVec::new(prometheus::Opts::new("x_events_total", help.clone()), &["who"]).unwrap();
        r.register(Box::new(c.clone())).unwrap();
        let g = prometheus::GaugeVec::new(prometheus::Opts::new("x_level", "Level."), &["who", "other"]).unwrap();
        r.register(Box::new(g.clone())).unwrap();
        let distinct: HashSet<&String> = values.iter().collect();
        for v in &values {
            c.with_label_values(&[v.as_str()]).inc();
            g.with_label_values(&[v.as_str(), "\\"]).set(2.0);
        }
        for format in [Format::Text, Format::OpenMetrics] {
            let body = exposition::encode(&r, format);
            let (samples, helps) = parse_exposition(&body, format)
                .map_err(|e| TestCaseError::fail(format!("{format:?}: {e}\n{body}")))?;
            let counters: Vec<&Sample> = samples.iter().filter(|s| s.name == "x_events_total").collect();
            prop_assert_eq!(counters.len(), distinct.len(), "{:?}:\n{}", format, body);
            let got: HashSet<&String> = counters.iter().filter_map(|s| label(s, "who")).collect();
            prop_assert_eq!(&got, &distinct, "{:?}:\n{}", format, body);
            for s in samples.iter().filter(|s| s.name == "x_level") {
                prop_assert_eq!(label(s, "other").map(String::as_str), Some("\\"));
                prop_assert!(label(s, "who").is_some_and(|w| distinct.contains(w)));
                prop_assert_eq!(&s.value, "2");
            }
            let fam = if format == Format::OpenMetrics { "x_events" } else { "x_events_total" };
            prop_assert_eq!(helps.get(fam), Some(&help), "{:?}:\n{}", format, body);
        }
    }

}

proptest! {
    #![proptest_config(cases(256))]

    /// The one label fed from outside the config: the NIXL version read from
    /// the wheel's dist-info on disk.
    #[test]
    fn build_info_carries_any_nixl_version_through_both_encoders(version in "[\"\\\\\n{}, a]{1,12}|\\PC{1,16}") {
        let rec = crate::record::Recorder::new(
            &BuildInfo::current(Some(&version)),
            crate::status::NixlStatus::default(),
            std::time::Instant::now(),
        );
        let m = rec.metrics();
        for format in [Format::Text, Format::OpenMetrics] {
            let body = m.encode(format);
            let (samples, _) = parse_exposition(&body, format)
                .map_err(|e| TestCaseError::fail(format!("{format:?}: {e}")))?;
            let info: Vec<&Sample> = samples.iter().filter(|s| s.name == "nixl_agent_build_info").collect();
            prop_assert_eq!(info.len(), 1);
            prop_assert_eq!(label(info[0], "nixl_version"), Some(&version));
        }
    }
}
