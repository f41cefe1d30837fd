//! `OneOrMany`: a hold's locks, or its calls' ranges, kept without an allocation in the common
//! case of one (a lock, a permit, a read hold), and boxed for a set's several.

use std::ops::Deref;

/// One item inline, or several boxed; either way a slice ([`Deref`]), never empty.
pub(crate) enum OneOrMany<T> {
    One([T; 1]),
    Many(Box<[T]>),
}

impl<T> OneOrMany<T> {
    /// One item, inline.
    pub(crate) fn one(item: T) -> Self {
        OneOrMany::One([item])
    }
}

impl<T> From<Vec<T>> for OneOrMany<T> {
    /// At least one item: `items` of one is kept inline.
    fn from(mut items: Vec<T>) -> Self {
        debug_assert!(!items.is_empty(), "OneOrMany holds at least one item");
        match (items.len(), items.pop()) {
            (1, Some(item)) => OneOrMany::one(item),
            (_, last) => {
                items.extend(last);
                OneOrMany::Many(items.into_boxed_slice())
            }
        }
    }
}

impl<T> Deref for OneOrMany<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            OneOrMany::One(item) => item,
            OneOrMany::Many(items) => items,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::OneOrMany;

    #[test]
    fn one_is_inline_and_many_keep_their_order() {
        let one = OneOrMany::from(vec![7]);
        assert!(matches!(one, OneOrMany::One(_)));
        assert_eq!(&*one, &[7]);
        let many = OneOrMany::from(vec![1, 2, 3]);
        assert!(matches!(many, OneOrMany::Many(_)));
        assert_eq!(&*many, &[1, 2, 3]);
    }
}
