//! Objects: the lifecycle objects a recording shows, one model for every kind.
//!
//! An object has a kind, a birth, polls (windows in which its allocations are
//! charged to it), an end, and children. rmcp's **session** is one kind (from a
//! preset: [`sessions`]); tokio's **task** is another, built in ([`tasks`]): any
//! tokio server has them. A task spawned while a session's window is open (its
//! birth request, its worker's polls) is that session's child, and its bytes
//! are the session's too. `summary.json`'s `objects` is their view by kind
//! (`outputs::objects`); tasks are also grouped by where they were spawned
//! ([`spawn_sites`]), which is where a task leak is decided.

pub mod sessions;
pub mod spawn_sites;
pub mod tasks;

/// The model's objects, made from a tracker's lives by `make(key, life)`, in
/// order of key. Made from the back, each life let go as its object is made
/// and the list of lives shrunk as it empties: a day of session churn is
/// ~2 M sessions and ~14 M tasks, and both lists held whole at once were
/// most of the analyzer's peak memory on it (5 GB, its first touch most of
/// the read's time on a machine that hands memory back to its host).
pub fn made<L, T>(mut lives: Vec<L>, mut make: impl FnMut(usize, L) -> T) -> Vec<T> {
    /// Lives let go between two shrinks: a shrink of a list this large is
    /// the allocator handing its tail pages back (`mremap`), not a copy.
    const SHRINK_EVERY: usize = 1 << 18;
    let mut made = Vec::with_capacity(lives.len());
    while let Some(life) = lives.pop() {
        made.push(make(lives.len(), life));
        if lives.capacity() - lives.len() >= SHRINK_EVERY {
            lives.shrink_to_fit();
        }
    }
    made.reverse();
    made
}

#[cfg(test)]
mod tests {
    #[test]
    fn objects_are_made_in_order_of_key() {
        let lives: Vec<u32> = (0..200_000).collect();
        let made = super::made(lives, |key, life| {
            assert_eq!(key as u32, life);
            u64::from(life) * 2
        });
        assert_eq!(made.len(), 200_000);
        assert!(made.iter().enumerate().all(|(i, &m)| m == i as u64 * 2));
    }
}
