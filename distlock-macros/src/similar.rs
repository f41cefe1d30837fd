//! "Did you mean": the closest of some names to a misspelt one, as rustc's own suggestions.

/// Of `candidates` (each the name compared, and the name suggested), the one closest to `typed`,
/// if it is close enough to be what was meant: an edit distance of at most a third of the
/// typed name's length (at least one).
pub(crate) fn closest(
    typed: &str,
    candidates: impl IntoIterator<Item = (String, String)>,
) -> Option<String> {
    let limit = (typed.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|(bare, name)| (edit_distance(typed, &bare), name))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, name)| name)
}

/// Edit distance between `a` and `b` in characters: insertions, deletions, substitutions and
/// swaps of two neighbours (`slef` is one edit from `self`) count one each.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // rows[i][j]: distance between the first i characters of `a` and the first j of `b`.
    let mut rows = vec![vec![0; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let substitution = rows[i - 1][j - 1] + usize::from(a[i - 1] != b[j - 1]);
            let mut best = substitution.min(rows[i - 1][j] + 1).min(rows[i][j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<(String, String)> {
        list.iter()
            .map(|n| (n.to_string(), n.to_string()))
            .collect()
    }

    #[test]
    fn close_names_are_suggested_far_ones_are_not() {
        let options = names(&["key", "ttl", "renew", "wait", "min_hold"]);
        assert_eq!(closest("tll", options.clone()), Some("ttl".into()));
        assert_eq!(closest("renwe", options.clone()), Some("renew".into()));
        assert_eq!(
            closest("min_hodl", options.clone()),
            Some("min_hold".into())
        );
        assert_eq!(closest("colour", options), None);
    }

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("idd", "id"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("über", "uber"), 1);
        assert_eq!(edit_distance("slef", "self"), 1);
        assert_eq!(edit_distance("ab", "ba"), 1);
    }
}
