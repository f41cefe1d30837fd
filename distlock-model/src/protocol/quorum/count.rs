//! How a quorum call's answers make its outcome (`deploy/redlock/count/`,
//! `deploy/redlock/count/leader.rs`): the replies so far, the masters still out (a master that
//! failed counts as one that did not answer, as `silent` has it), and whether the call can
//! still change.

use crate::scripts::Reply;

use super::world::{inner, Answer};

/// An acquire's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// Taken by a majority within the validity time: the largest token of the replies.
    Taken(i64),
    /// Held by others on so many masters that a majority is out of reach: the smallest pttl.
    Busy(i64),
}

/// A call's outcome: decided, or not yet (masters still out could change it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome<T> {
    /// Decided.
    Done(T),
    /// Undecided while masters are still out.
    Open,
    /// Every master answered or failed, undecided: `NoQuorum`.
    NoQuorum,
}

fn replies(answers: &[Answer]) -> Vec<&Reply> {
    answers
        .iter()
        .filter_map(|a| match a {
            Answer::Reply(r) => Some(r),
            _ => None,
        })
        .collect()
}

fn outstanding(answers: &[Answer]) -> bool {
    answers.contains(&Answer::Out)
}

/// Undecided with every master done is `NoQuorum`.
fn close<T>(t: Option<T>, answers: &[Answer]) -> Outcome<T> {
    match t {
        Some(t) => Outcome::Done(t),
        None if outstanding(answers) => Outcome::Open,
        None => Outcome::NoQuorum,
    }
}

/// `acquired`: an `ACQUIRE_QUEUED` call's answers, `elapsed` ms after it was sent, with a
/// lease of `ttl` and the margin; `required` grants (a majority).
pub fn acquired(
    answers: &[Answer],
    required: usize,
    elapsed: i64,
    (ttl, margin): (i64, i64),
) -> Outcome<Acquired> {
    let replies = replies(answers);
    let silent = answers.len() - replies.len();
    let mut tokens = Vec::new();
    let mut pttls = Vec::new();
    for r in &replies {
        match inner(r).as_slice() {
            [1, token, ..] => tokens.push(*token),
            [0 | 3, pttl, ..] => pttls.push(*pttl),
            _ => {}
        }
    }
    let t = if tokens.len() >= required {
        // Validity: what is left of the lease once the acquire is done, less the margin.
        (elapsed + margin < ttl).then(|| Acquired::Taken(tokens.iter().copied().max().unwrap_or(0)))
    } else if tokens.len() + silent >= required {
        None
    } else {
        let pttl = pttls.iter().copied().filter(|&p| p >= 0).min();
        Some(Acquired::Busy(
            pttl.or(pttls.first().copied()).unwrap_or(-1),
        ))
    };
    close(t, answers)
}

/// `released`: a release's answers (decided, whichever way, or not).
pub fn released(answers: &[Answer], required: usize) -> Outcome<bool> {
    let replies = replies(answers);
    let silent = answers.len() - replies.len();
    let yes = replies.iter().filter(|r| inner(r) == [0]).count();
    let t = if yes >= required {
        Some(true)
    } else if yes + silent >= required {
        None
    } else {
        Some(false)
    };
    close(t, answers)
}

/// `answered` for `FENCE_FLOOR`: the largest floor (before a raise) of the `required` masters
/// that answered first.
pub fn floor(answers: &[Answer], required: usize) -> Outcome<i64> {
    let replies = replies(answers);
    let t = (replies.len() >= required).then(|| {
        replies
            .iter()
            .filter_map(|r| inner(r).first().copied())
            .max()
            .unwrap_or(0)
    });
    close(t, answers)
}

/// A proclaim's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proclaimed {
    /// The lock is no longer held by a majority: nothing counts.
    Lost,
    /// A majority wrote this very term.
    Agreed(i64),
    /// A majority holds the lock but wrote no one term: another round with this as `exact`.
    Again(i64),
}

/// `ProclaimCall::count` over every master that can answer (those that failed aside), for a
/// round that asks for no `exact` term: [`proclaimed_exact`] with `exact` 0.
pub fn proclaimed(answers: &[Answer], required: usize) -> Outcome<Proclaimed> {
    proclaimed_exact(answers, required, 0)
}

/// `ProclaimCall::count` over every master that can answer (those that failed aside), for a
/// round asking for `exact` (0: none). Asked for `exact`, a master writes exactly it, answers
/// that it needs a term above it (not written), or keeps this hold's own record where that is
/// already above it (written): a round of this hold answered after its call's timeout wrote the
/// master's own term there, which no count took in, and a proclaim never lowers. That record
/// neither counts for `exact` nor asks for a term above it.
pub fn proclaimed_exact(answers: &[Answer], required: usize, exact: i64) -> Outcome<Proclaimed> {
    let replies = replies(answers);
    // Once every master answered or failed, it is settled by those that answered.
    let silent = match outstanding(answers) {
        true => answers.len() - replies.len(),
        false => 0,
    };
    // (term, written) of each master that holds the lock for this value.
    let held: Vec<(i64, bool)> = replies
        .iter()
        .filter_map(|r| {
            let items = r.items().get(1).map(|i| i.items().to_vec())?;
            let term = match items.get(1) {
                Some(Reply::Bulk(t)) => t.parse::<i64>().ok()?,
                _ => return None,
            };
            match items.first() {
                Some(Reply::Int(1)) => Some((term, true)),
                Some(Reply::Int(2)) => Some((term, false)),
                _ => None,
            }
        })
        .collect();
    if held.len() + silent < required {
        return Outcome::Done(Proclaimed::Lost);
    }
    // Every master's answer counts (one still out may carry a larger term).
    if outstanding(answers) {
        return Outcome::Open;
    }
    let ahead = |(t, w): (i64, bool)| exact != 0 && w && t > exact;
    let top = held.iter().filter(|&&p| !ahead(p)).map(|&(t, _)| t).max();
    let Some(top) = top.or((exact != 0).then_some(exact)) else {
        return Outcome::NoQuorum;
    };
    let at_top = held.iter().filter(|&&(t, w)| w && t == top).count();
    if at_top >= required {
        return Outcome::Done(Proclaimed::Agreed(top));
    }
    if held.len() >= required {
        return Outcome::Done(Proclaimed::Again(top));
    }
    Outcome::NoQuorum
}
