//! Per-site totals: blocks still live at the end, grouped by allocation stack.

use std::collections::HashMap;

use leakscope_recording::StackId;

use crate::accounting::Block;
use crate::attribute::Category;
use crate::stacks::Stacks;
use crate::symbolize::Frame;

/// A call site still holding memory at the end.
#[derive(Debug, Clone)]
pub struct Site {
    pub stack: Option<StackId>,
    pub frames: Vec<Frame>,
    pub category: Category,
    /// Index in `frames` of the frame whose rule chose the category.
    pub decided_by: Option<usize>,
    /// Bytes live at the end.
    pub retained_bytes: u64,
    pub blocks: u64,
    /// Of `retained_bytes`, those of sessions whose worker is gone.
    pub session_bytes: u64,
}

/// Groups live blocks (with whether their session's worker is gone) by stack:
/// most session-retained bytes first, then most live bytes.
pub fn sites<'a>(
    live: impl IntoIterator<Item = &'a (Block, bool)>,
    stacks: &mut Stacks,
) -> Vec<Site> {
    let mut by_stack: HashMap<Option<StackId>, Site> = HashMap::new();
    for (block, worker_gone) in live {
        let site = by_stack.entry(block.stack).or_insert_with(|| Site {
            stack: block.stack,
            frames: Vec::new(),
            category: block.category,
            decided_by: None,
            retained_bytes: 0,
            blocks: 0,
            session_bytes: 0,
        });
        site.retained_bytes += block.size;
        site.blocks += 1;
        if *worker_gone {
            site.session_bytes += block.size;
        }
    }
    let mut sites: Vec<Site> = by_stack.into_values().collect();
    sites.sort_by(|a, b| {
        b.session_bytes
            .cmp(&a.session_bytes)
            .then(b.retained_bytes.cmp(&a.retained_bytes))
    });
    for site in &mut sites {
        site.frames = stacks.frames(site.stack);
        site.decided_by = stacks.decided_by(&site.frames);
    }
    sites
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribute::Rules;

    #[test]
    fn groups_by_stack_with_session_bytes_first() {
        let block = |size, stack| Block {
            size,
            category: Category::Other,
            stack,
            session: None,
        };
        let live = vec![
            (block(10, Some(1)), false),
            (block(10, Some(1)), false),
            (block(5, Some(2)), true),
            (block(1, None), false),
        ];
        let sites = sites(&live, &mut Stacks::new(Rules::builtin()));
        assert_eq!(sites.len(), 3);
        assert_eq!((sites[0].stack, sites[0].session_bytes), (Some(2), 5));
        assert_eq!((sites[1].retained_bytes, sites[1].blocks), (20, 2));
    }
}
