//! Shortening text for messages and for what is sent on: cut at a character boundary,
//! saying how much was left out.

/// `text` cut to at most `max_chars` characters, with a note of how many more there were.
pub(crate) fn shorten(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        None => text.to_owned(),
        Some((cut, _)) => format!(
            "{} … ({} more characters)",
            &text[..cut],
            text[cut..].chars().count()
        ),
    }
}

/// `text` cut to at most `max_bytes` bytes (at a character boundary), with `note(n)` for
/// the `n` bytes left out appended.
pub(crate) fn cap_bytes(text: &str, max_bytes: usize, note: impl Fn(usize) -> String) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let cut = (0..=max_bytes)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}{}", &text[..cut], note(text.len() - cut))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_at_character_boundaries_and_says_how_much() {
        assert_eq!(shorten("héllo", 10), "héllo");
        assert_eq!(shorten("héllo", 2), "hé … (3 more characters)");
        assert_eq!(cap_bytes("héllo", 2, |n| format!("+{n}")), "h+5");
        assert_eq!(cap_bytes("hi", 2, |n| format!("+{n}")), "hi");
    }
}
