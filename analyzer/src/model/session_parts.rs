//! What a session holds, by the way each of its blocks came to be the
//! session's. A user sizing a leak asks what a session is made of (the map
//! entry? its tasks? what the handler built for it?), and the parts add up to
//! the session's bytes, so a report can show both without a remainder.

use super::Category;

/// How a session's block came to be the session's, decided once per block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    /// What its entry in the session map keeps alive (the handle, its channel).
    MapEntry,
    /// The channels between its handle and its worker.
    Channels,
    /// What the request that created the session allocated for it (the
    /// service instance the handler makes, a registry cloned per session).
    Request,
    /// What its tasks hold: their cells and what their polls allocated.
    Tasks,
    /// What its own scopes allocated (its worker's polls, its spans).
    Scopes,
}

impl Part {
    pub const COUNT: usize = 5;

    pub const ALL: [Part; Part::COUNT] = [
        Part::MapEntry,
        Part::Channels,
        Part::Request,
        Part::Tasks,
        Part::Scopes,
    ];

    /// The part of a session's block. Its category wins (a map entry's or a
    /// channel's block is that wherever it was allocated); then whether the
    /// creating request allocated it (the handler's poll is a task's, but
    /// not one of the session's); then its task.
    pub fn of(category: Category, from_request: bool, in_task: bool) -> Part {
        match category {
            Category::SessionMap => Part::MapEntry,
            Category::WorkerChannel => Part::Channels,
            _ if from_request => Part::Request,
            _ if in_task => Part::Tasks,
            _ => Part::Scopes,
        }
    }

    /// What the part is, for a reader of the report.
    pub fn meaning(self) -> &'static str {
        match self {
            Part::MapEntry => "its entry in the session map (the handle and what it keeps)",
            Part::Channels => "the channels between its handle and its worker",
            Part::Request => {
                "what the request that created it allocated for it (e.g. the service instance)"
            }
            Part::Tasks => "its tasks: their cells and what their polls allocated",
            Part::Scopes => "what its worker's polls and its spans allocated otherwise",
        }
    }
}

/// Bytes per [`Part`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerPart(pub [u64; Part::COUNT]);

impl PerPart {
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// (part, bytes) in [`Part::ALL`] order.
    pub fn entries(&self) -> impl Iterator<Item = (Part, u64)> + '_ {
        Part::ALL.into_iter().zip(self.0.iter().copied())
    }
}

impl std::ops::Index<Part> for PerPart {
    type Output = u64;
    fn index(&self, part: Part) -> &u64 {
        &self.0[part as usize]
    }
}

impl std::ops::IndexMut<Part> for PerPart {
    fn index_mut(&mut self, part: Part) -> &mut u64 {
        &mut self.0[part as usize]
    }
}

impl std::ops::AddAssign for PerPart {
    fn add_assign(&mut self, other: Self) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a += b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocks_category_decides_before_how_it_was_taken() {
        assert_eq!(Part::of(Category::SessionMap, true, true), Part::MapEntry);
        assert_eq!(
            Part::of(Category::WorkerChannel, true, false),
            Part::Channels
        );
        // The creating request's poll is a task's (the HTTP handler's), not the session's.
        assert_eq!(Part::of(Category::Other, true, true), Part::Request);
        assert_eq!(Part::of(Category::WorkerOther, false, true), Part::Tasks);
        assert_eq!(Part::of(Category::WorkerOther, false, false), Part::Scopes);
    }
}
