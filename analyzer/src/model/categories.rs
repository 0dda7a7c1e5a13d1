//! Which kind of memory a block is (the attribute stage decides it from the
//! block's stack, `stages/attribute.rs`), and a value per kind.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Category {
    SessionMap,
    WorkerChannel,
    WorkerOther,
    Other,
}

impl Category {
    /// How many categories there are: the size of every per-category array.
    pub const COUNT: usize = 4;

    pub const ALL: [Category; Category::COUNT] = [
        Category::SessionMap,
        Category::WorkerChannel,
        Category::WorkerOther,
        Category::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Category::SessionMap => "session-map",
            Category::WorkerChannel => "worker-channel",
            Category::WorkerOther => "worker-other",
            Category::Other => "other",
        }
    }
}

/// One value per [`Category`], indexed by category.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerCategory<T>(pub [T; Category::COUNT]);

impl<T> PerCategory<T> {
    /// The values in [`Category::ALL`] order.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.0.iter()
    }

    /// (category, value) pairs in [`Category::ALL`] order.
    pub fn entries(&self) -> impl Iterator<Item = (Category, &T)> {
        Category::ALL.into_iter().zip(self.0.iter())
    }
}

impl<T> std::ops::Index<Category> for PerCategory<T> {
    type Output = T;
    fn index(&self, category: Category) -> &T {
        &self.0[category as usize]
    }
}

impl<T> std::ops::IndexMut<Category> for PerCategory<T> {
    fn index_mut(&mut self, category: Category) -> &mut T {
        &mut self.0[category as usize]
    }
}
