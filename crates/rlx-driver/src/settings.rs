//! Settings: every `RLX_*` knob is declared once as a [`Knob`] (name, default, meaning) in
//! its crate's `settings` module, read from the environment only through [`Knob::raw`],
//! parsed there into that crate's typed options, and listed by `rlx devices --settings`
//! (each backend's [`Setting`]s).

use std::str::FromStr;

/// A knob: an environment variable parsed once into a crate's typed options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Knob {
    /// the environment variable
    pub name: &'static str,
    /// the value in effect when it is unset (as it would be written; `""`: none)
    pub default: &'static str,
    /// what it changes, in a line
    pub help: &'static str,
}

impl Knob {
    /// The variable's value when set: the one place RLX reads its knobs from the
    /// environment.
    pub fn raw(&self) -> Option<String> {
        std::env::var(self.name).ok()
    }

    /// An on/off switch: `0` is off, `1` is on, unset or anything else is the default
    /// (`"1"` on, else off).
    pub fn switch(&self) -> bool {
        switch_value(self.raw().as_deref(), self.default)
    }

    /// The value parsed as `T` when set and valid; None otherwise.
    pub fn parse<T: FromStr>(&self) -> Option<T> {
        self.raw()?.trim().parse().ok()
    }

    /// This knob with the value it has now.
    pub fn setting(&self) -> Setting {
        Setting {
            name: self.name,
            value: self.raw(),
            default: self.default,
            help: self.help,
        }
    }
}

/// [`Knob::switch`] on a given value, for tests and callers holding the value already.
pub fn switch_value(value: Option<&str>, default: &str) -> bool {
    match value.map(str::trim) {
        Some("0") => false,
        Some("1") => true,
        _ => default == "1",
    }
}

/// A byte count as knobs write it: digits with an optional binary suffix (`K`, `M`, `G`,
/// `T`, an optional trailing `B` or `iB`), e.g. `64M`, `2GiB`, `1048576`.
pub fn parse_bytes(text: &str) -> Option<usize> {
    let t = text.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.char_indices().last()? {
        (i, 'K' | 'k') => (&t[..i], 10),
        (i, 'M' | 'm') => (&t[..i], 20),
        (i, 'G' | 'g') => (&t[..i], 30),
        (i, 'T' | 't') => (&t[..i], 40),
        _ => (t, 0),
    };
    let n: usize = digits.trim().parse().ok()?;
    n.checked_mul(1usize << shift)
}

/// A knob and its value now, as `rlx devices --settings` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// the environment variable
    pub name: &'static str,
    /// its value, None when unset
    pub value: Option<String>,
    /// the value in effect when unset
    pub default: &'static str,
    /// what it changes
    pub help: &'static str,
}

/// The settings of a list of knobs.
pub fn settings(knobs: &[Knob]) -> Vec<Setting> {
    knobs.iter().map(Knob::setting).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_fall_back_to_their_default() {
        assert!(switch_value(None, "1"));
        assert!(!switch_value(None, "0"));
        assert!(!switch_value(Some("0"), "1"));
        assert!(switch_value(Some(" 1 "), "0"));
        assert!(switch_value(Some("yes"), "1"));
        assert!(!switch_value(Some("yes"), "0"));
    }

    #[test]
    fn byte_counts() {
        assert_eq!(parse_bytes("0"), Some(0));
        assert_eq!(parse_bytes("1048576"), Some(1 << 20));
        assert_eq!(parse_bytes("64M"), Some(64 << 20));
        assert_eq!(parse_bytes("2GiB"), Some(2 << 30));
        assert_eq!(parse_bytes(" 512kB "), Some(512 << 10));
        assert_eq!(parse_bytes(" 3 G "), Some(3 << 30));
        assert_eq!(parse_bytes("1T"), Some(1 << 40));
        for bad in ["", "M", "-1M", "1.5G", "lots", "99999999999999999999T"] {
            assert_eq!(parse_bytes(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_unset_knob_reads_none() {
        let k = Knob {
            name: "RLX_TEST_KNOB_NEVER_SET_9f3",
            default: "4",
            help: "test",
        };
        assert_eq!(k.raw(), None);
        assert_eq!(k.parse::<usize>(), None);
        assert_eq!(k.setting().value, None);
        assert_eq!(k.setting().default, "4");
    }
}
