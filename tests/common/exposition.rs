//! A strict parser of both exposition formats: it fails on anything a scraper could
//! misread — duplicate series, interleaved or redeclared families, samples that do not belong
//! to the family declared above them, bad names or escapes, a missing or misplaced `# EOF`.

use std::collections::{BTreeMap, HashSet};

#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub name: String,
    pub kind: String,
    pub unit: Option<String>,
    pub help: String,
    pub samples: Vec<Sample>,
}

fn valid_name(name: &str, allow_colon: bool) -> bool {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || (allow_colon && c == ':'));
    first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (allow_colon && c == ':'))
}

pub fn parse(text: &str, openmetrics: bool) -> Result<Vec<Family>, String> {
    if !text.ends_with('\n') {
        return Err("exposition does not end with a newline".into());
    }
    let mut families: Vec<Family> = Vec::new();
    let mut seen_families = HashSet::new();
    let mut seen_series = HashSet::new();
    let mut eof = false;
    for (number, line) in text.lines().enumerate() {
        let at = |e: String| format!("line {}: {e}: {line:?}", number + 1);
        if eof {
            return Err(at("content after # EOF".into()));
        }
        if line == "# EOF" {
            if !openmetrics {
                return Err(at("# EOF in the classic text format".into()));
            }
            eof = true;
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            if !valid_name(name, true) || !seen_families.insert(name.to_string()) {
                return Err(at("invalid or repeated family".into()));
            }
            families.push(Family {
                name: name.into(),
                kind: String::new(),
                unit: None,
                help: help.into(),
                samples: vec![],
            });
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .ok_or_else(|| at("malformed TYPE".into()))?;
            let family = families
                .last_mut()
                .filter(|f| f.name == name && f.kind.is_empty() && f.samples.is_empty());
            let family = family.ok_or_else(|| at("TYPE not right after its HELP".into()))?;
            let allowed: &[&str] = if openmetrics {
                &[
                    "counter",
                    "gauge",
                    "info",
                    "stateset",
                    "histogram",
                    "gaugehistogram",
                    "summary",
                    "unknown",
                ]
            } else {
                &["counter", "gauge", "histogram", "summary", "untyped"]
            };
            if !allowed.contains(&kind) {
                return Err(at(format!("unknown type {kind}")));
            }
            family.kind = kind.into();
        } else if let Some(rest) = line.strip_prefix("# UNIT ") {
            if !openmetrics {
                return Err(at("UNIT in the classic text format".into()));
            }
            let (name, unit) = rest
                .split_once(' ')
                .ok_or_else(|| at("malformed UNIT".into()))?;
            let family = families
                .last_mut()
                .filter(|f| f.name == name && f.samples.is_empty());
            let family = family.ok_or_else(|| at("UNIT not in its family's header".into()))?;
            if !name.ends_with(&format!("_{unit}")) {
                return Err(at("family name does not end with its unit".into()));
            }
            family.unit = Some(unit.into());
        } else if line.starts_with('#') {
            return Err(at("unexpected comment".into()));
        } else {
            let sample = parse_sample(line).map_err(at)?;
            let family = families
                .last_mut()
                .ok_or_else(|| at("sample before any family".into()))?;
            let expected = match (openmetrics, family.kind.as_str()) {
                (true, "counter") => format!("{}_total", family.name),
                (true, "info") => format!("{}_info", family.name),
                _ => family.name.clone(),
            };
            if sample.name != expected {
                return Err(at(format!(
                    "sample does not belong to family {}",
                    family.name
                )));
            }
            if (family.kind == "counter" || family.kind == "info")
                && (sample.value.is_nan() || sample.value < 0.0)
            {
                return Err(at("counter or info value is negative or NaN".into()));
            }
            if family.kind == "info" && sample.value != 1.0 {
                return Err(at("info value is not 1".into()));
            }
            let key = format!("{}{:?}", sample.name, sample.labels);
            if !seen_series.insert(key) {
                return Err(at("duplicate series".into()));
            }
            family.samples.push(sample);
        }
    }
    if openmetrics && !eof {
        return Err("OpenMetrics exposition without # EOF".into());
    }
    if let Some(empty) = families
        .iter()
        .find(|f| f.samples.is_empty() || f.kind.is_empty())
    {
        return Err(format!("family {} has no TYPE or no samples", empty.name));
    }
    Ok(families)
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("no value")?;
    let name = &line[..name_end];
    if !valid_name(name, true) {
        return Err(format!("invalid metric name {name:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices().peekable();
        loop {
            let start = chars.peek().map(|(i, _)| *i).ok_or("unterminated labels")?;
            if inner[start..].starts_with('}') {
                rest = &inner[start + 1..];
                break;
            }
            let eq = inner[start..].find('=').ok_or("label without =")? + start;
            let label = &inner[start..eq];
            if !valid_name(label, false) || label.starts_with("__") {
                return Err(format!("invalid label name {label:?}"));
            }
            if !inner[eq + 1..].starts_with('"') {
                return Err("label value not quoted".into());
            }
            let mut value = String::new();
            let mut end = None;
            let mut escaped = false;
            for (i, c) in inner[eq + 2..].char_indices() {
                match (escaped, c) {
                    (true, 'n') => {
                        value.push('\n');
                        escaped = false
                    }
                    (true, '\\') | (true, '"') => {
                        value.push(c);
                        escaped = false
                    }
                    (true, _) => return Err(format!("bad escape \\{c}")),
                    (false, '\\') => escaped = true,
                    (false, '"') => {
                        end = Some(eq + 2 + i);
                        break;
                    }
                    (false, _) => value.push(c),
                }
            }
            let end = end.ok_or("unterminated label value")?;
            if labels.insert(label.to_string(), value).is_some() {
                return Err(format!("label {label} repeated"));
            }
            while chars.peek().is_some_and(|(i, _)| *i <= end) {
                chars.next();
            }
            if let Some((_, ',')) = chars.peek() {
                chars.next();
            } else if chars.peek().map(|(_, c)| *c) != Some('}') {
                return Err("expected , or } after a label".into());
            }
        }
    }
    let value_text = rest.strip_prefix(' ').ok_or("no space before value")?;
    if value_text.contains(' ') {
        return Err("timestamps or trailing text are not expected".into());
    }
    let value = match value_text {
        "NaN" => f64::NAN,
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().map_err(|_| format!("bad value {v:?}"))?,
    };
    Ok(Sample {
        name: name.into(),
        labels,
        value,
    })
}

/// The value of the sample `name` whose labels include all of `labels`.
pub fn value(families: &[Family], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    families
        .iter()
        .flat_map(|f| &f.samples)
        .find(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_what_a_scraper_could_misread() {
        let good = "# HELP a x\n# TYPE a gauge\na{l=\"1\"} 1\na{l=\"2\"} 2\n";
        assert!(parse(good, false).is_ok());
        for bad in [
            "# HELP a x\n# TYPE a gauge\na{l=\"1\"} 1\na{l=\"1\"} 2\n",
            "# HELP a x\n# TYPE a gauge\na 1\n# HELP b x\n# TYPE b gauge\nb 1\n# HELP a x\n# TYPE a gauge\n",
            "# HELP a x\n# TYPE a gauge\nb 1\n",
            "# HELP a x\n# TYPE a gauge\na{l=1} 1\n",
            "# HELP a x\n# TYPE a gauge\na{l=\"1\"} x\n",
            "# HELP a x\n# TYPE a gauge\na 1",
            "# HELP a x\n# TYPE a counter\na -1\n",
            "# HELP a x\n# TYPE a gauge\na 1\n# EOF\n",
        ] {
            assert!(parse(bad, false).is_err(), "{bad:?}");
        }
        assert!(parse("# HELP a x\n# TYPE a counter\na_total 1\n# EOF\n", true).is_ok());
        assert!(parse("# HELP a x\n# TYPE a counter\na_total 1\n", true).is_err());
        assert!(parse(
            "# HELP a_s x\n# TYPE a_s gauge\n# UNIT a_s bytes\na_s 1\n# EOF\n",
            true
        )
        .is_err());
    }
}
