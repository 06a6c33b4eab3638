//! Parsing a judge model's reply into a [`SteeringDecision`] (SPEC 3.1).
//!
//! The reply is trimmed and stripped of leading markdown/quote characters (`*`, `` ` ``, `"`, `'`). It must then
//! *start* with `ALLOW`, `DENY` or `GUIDE` (any case) followed by an ASCII word boundary — the end of the text or
//! a character outside `[A-Za-z0-9_]`. Guidance is the rest of the reply with a leading run of `:` and whitespace
//! removed, casing kept; trailing quote or markdown characters that mirror the stripped prefix are removed too.
//! Anything else is unparseable (`None`).

use super::{SteeringAction, SteeringDecision};

const WRAPPERS: &[char] = &['*', '`', '"', '\''];

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Parses a verdict; `None` when the reply is not one.
pub fn parse_verdict(reply: &str) -> Option<SteeringDecision> {
    let text = reply.trim().trim_start_matches(WRAPPERS);
    let stripped_prefix = reply.trim().len() != text.len();
    for (keyword, action) in
        [("ALLOW", SteeringAction::Allow), ("DENY", SteeringAction::Deny), ("GUIDE", SteeringAction::Guide)]
    {
        let Some(head) = text.get(..keyword.len()) else { continue };
        if !head.eq_ignore_ascii_case(keyword) {
            continue;
        }
        let rest = &text[keyword.len()..];
        if rest.chars().next().is_some_and(is_word_char) {
            continue;
        }
        if action == SteeringAction::Allow {
            return Some(SteeringDecision::allow());
        }
        let mut guidance = rest.trim_start_matches(|c: char| c == ':' || c.is_whitespace());
        if stripped_prefix {
            guidance = guidance.trim_start_matches(WRAPPERS).trim_end_matches(WRAPPERS);
            guidance = guidance.trim_start_matches(|c: char| c == ':' || c.is_whitespace());
        }
        let guidance = guidance.trim();
        let guidance = (!guidance.is_empty()).then(|| guidance.to_owned());
        return Some(SteeringDecision { action, guidance });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use SteeringAction::{Allow, Deny, Guide};

    fn check(reply: &str, expected: Option<(SteeringAction, Option<&str>)>) {
        let got = parse_verdict(reply).map(|d| (d.action, d.guidance));
        let want = expected.map(|(a, g)| (a, g.map(str::to_owned)));
        assert_eq!(got, want, "reply {reply:?}");
    }

    #[test]
    fn verdict_table() {
        check("DENY", Some((Deny, None)));
        check("deny.", Some((Deny, Some("."))));
        check("DENY: no way", Some((Deny, Some("no way"))));
        check("DENY:unsafe", Some((Deny, Some("unsafe"))));
        check("DENY\nreason", Some((Deny, Some("reason"))));
        check("DENY: ", Some((Deny, None)));
        check("DENY-X", Some((Deny, Some("-X"))));
        check("DENYALL", None);
        check("DENY_X", None);
        check("DENY1", None);
        check("ALLOWED", None);
        check("GUIDELINE: x", None);
        check("Guide:", Some((Guide, None)));
        check("GUIDE::double", Some((Guide, Some("double"))));
        check("GUIDE: please Use the Safe path", Some((Guide, Some("please Use the Safe path"))));
        check("guide - use X", Some((Guide, Some("- use X"))));
        check("**DENY**", Some((Deny, None)));
        check("**DENY**: too risky", Some((Deny, Some("too risky"))));
        check("\"ALLOW\"", Some((Allow, None)));
        check("`GUIDE: use /tmp`", Some((Guide, Some("use /tmp"))));
        check("'deny'", Some((Deny, None)));
        check("Allow.", Some((Allow, None)));
        check("allow: but deny", Some((Allow, None)));
        check("  \n ALLOW \n", Some((Allow, None)));
        check("I would DENY this", None);
        check("", None);
        check("   ", None);
        check("DENYé", Some((Deny, Some("é"))));
        check("ÉDENY", None);
    }
}
