//! A small matcher over the Prometheus text format:
//! `scrape.metric("x").label("k", "v").value()`.

/// One sample line.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// A parsed exposition.
#[derive(Debug, Clone)]
pub struct Scrape {
    pub samples: Vec<Sample>,
    pub text: String,
}

impl Scrape {
    pub fn parse(text: &str) -> Scrape {
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| parse_line(l).unwrap_or_else(|| panic!("unparseable sample line: {l}")))
            .collect();
        Scrape {
            samples,
            text: text.to_string(),
        }
    }

    /// Starts a match on samples named `name`.
    pub fn metric(&self, name: &str) -> Match<'_> {
        Match {
            scrape: self,
            name: name.to_string(),
            labels: vec![],
        }
    }

    /// Names of every `# TYPE` family.
    /// The value of the one series of `name` with these labels, 0 when
    /// there is none (a family that appears on first use).
    pub fn value_at(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        labels
            .iter()
            .fold(self.metric(name), |m, (k, v)| m.label(k, v))
            .get()
            .unwrap_or(0.0)
    }

    pub fn families(&self) -> Vec<String> {
        self.text
            .lines()
            .filter_map(|l| {
                l.strip_prefix("# TYPE ")
                    .and_then(|r| r.split_whitespace().next())
                    .map(String::from)
            })
            .collect()
    }
}

/// A partial match: a name and some labels.
#[derive(Debug, Clone)]
pub struct Match<'a> {
    scrape: &'a Scrape,
    name: String,
    labels: Vec<(String, String)>,
}

impl Match<'_> {
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.push((k.to_string(), v.to_string()));
        self
    }

    pub fn samples(&self) -> Vec<&Sample> {
        self.scrape
            .samples
            .iter()
            .filter(|s| {
                s.name == self.name
                    && self
                        .labels
                        .iter()
                        .all(|(k, v)| s.labels.iter().any(|(k2, v2)| k == k2 && v == v2))
            })
            .collect()
    }

    /// The value of the single matching sample; panics when none or several match.
    pub fn value(&self) -> f64 {
        match self.samples().as_slice() {
            [s] => s.value,
            [] => panic!("no sample {} {:?}", self.name, self.labels),
            many => panic!("{} samples match {} {:?}: {many:?}", many.len(), self.name, self.labels),
        }
    }

    /// The value, or `None` when nothing matches.
    pub fn get(&self) -> Option<f64> {
        let s = self.samples();
        (s.len() == 1).then(|| s[0].value)
    }

    /// Sum over every matching sample.
    pub fn sum(&self) -> f64 {
        self.samples().iter().map(|s| s.value).sum()
    }
}

fn parse_line(l: &str) -> Option<Sample> {
    let (name_labels, value) = match l.find('{') {
        Some(_) => {
            let close = l.rfind('}')?;
            (&l[..=close], l[close + 1..].trim())
        }
        None => {
            let (n, v) = l.split_once(' ')?;
            (n, v.trim())
        }
    };
    let value = value.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    let (name, labels) = match name_labels.split_once('{') {
        Some((n, rest)) => (n.to_string(), parse_labels(rest.strip_suffix('}')?)?),
        None => (name_labels.to_string(), vec![]),
    };
    Some(Sample { name, labels, value })
}

fn parse_labels(s: &str) -> Option<Vec<(String, String)>> {
    let mut out = vec![];
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek() == Some(&',') || chars.peek() == Some(&' ') {
            chars.next();
        }
        if chars.peek().is_none() {
            return Some(out);
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if chars.next()? != '"' {
            return None;
        }
        let mut val = String::new();
        loop {
            match chars.next()? {
                '\\' => match chars.next()? {
                    'n' => val.push('\n'),
                    c => val.push(c),
                },
                '"' => break,
                c => val.push(c),
            }
        }
        out.push((key.trim().to_string(), val));
    }
}
