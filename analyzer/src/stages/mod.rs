//! The analysis stages, in the order a record meets them. Each produces plain
//! data for the next (or for the outputs) and is tested alone.

pub mod accounting;
pub mod attribute;
pub mod objects;
pub mod profile;
pub mod sites;
pub mod stacks;
pub mod symbolize;
pub mod timeline;
pub mod verdict;
