use super::*;
use crate::model::Frame;
use crate::stages::attribute::Rules;

fn block(ts: u64, size: u64, stack: Option<StackId>) -> Block {
    Block {
        ts,
        seq: ts,
        size,
        extent: size,
        weight: 1.0,
        category: Category::Other,
        stack,
        session: None,
        task: None,
        from_request: false,
    }
}

#[test]
fn groups_by_stack_with_session_bytes_first() {
    let live = vec![
        (block(0, 10, Some(1)), false),
        (block(0, 10, Some(1)), false),
        (block(0, 5, Some(2)), true),
        (block(0, 1, None), false),
    ];
    let mut stacks = Stacks::new(Rules::builtin());
    // Distinct (unknown) addresses: distinct sites.
    stacks.add(1, vec![0x10]);
    stacks.add(2, vec![0x20]);
    let sites = sites(&live, 4, &mut stacks);
    assert_eq!(sites.len(), 3);
    assert_eq!((sites[0].stack, sites[0].session_bytes), (Some(2), 5));
    assert_eq!((sites[1].retained_bytes, sites[1].blocks), (20, 2));
}

#[test]
fn identical_symbolized_stacks_are_one_site() {
    let mut stacks = Stacks::new(Rules::builtin());
    stacks.add(1, vec![0x10, 0x30]);
    stacks.add(2, vec![0x10, 0x30]);
    let live = vec![
        (block(0, 10, Some(1)), false),
        (block(0, 7, Some(2)), false),
    ];
    let sites = sites(&live, 2, &mut stacks);
    assert_eq!(sites.len(), 1);
    assert_eq!((sites[0].retained_bytes, sites[0].blocks), (17, 2));
}

#[test]
fn allocator_frames_are_trimmed_from_the_inner_end() {
    let frame = |name: &str| Frame {
        function: name.into(),
        location: None,
    };
    let trimmed = Trimmer::new().trim(vec![
        frame("alloc::alloc::alloc"),
        frame("alloc_impl_runtime"),
        frame("alloc_impl"),
        frame("do_alloc<alloc::alloc::Global>"),
        frame("__rustc::__rdl_alloc"),
        frame("my_server::cache::insert"),
        frame("alloc::alloc::alloc"),
        frame("main"),
    ]);
    let names: Vec<&str> = trimmed.iter().map(|f| f.function.as_str()).collect();
    assert_eq!(
        names,
        ["my_server::cache::insert", "alloc::alloc::alloc", "main"]
    );
}

/// A live block of `size` bytes, the `seq`-th allocation of the recording.
/// The accounting's sample of `live` bytes at allocation `allocs`.
fn half_way(allocs: u64, live: u64) -> Vec<crate::model::Sample> {
    let mut sample = crate::model::Sample {
        t_s: 1.0,
        live: Default::default(),
        reclaimed_total: 0,
        allocs,
    };
    sample.live[Category::Other] = live;
    vec![sample]
}

fn nth(seq: u64, size: u64) -> (Block, bool) {
    let mut block = block(0, size, None);
    block.seq = seq;
    (block, false)
}

#[test]
fn a_warm_up_is_settled_and_growth_is_not() {
    // What was live half-way through the activity (allocation 1000 of 2000).
    let half = |live: u64| half_way(1000, live);
    // A cache filled by the first requests, and a request in flight at the end.
    let warm = [nth(10, 1000), nth(20, 1000), nth(1990, 1000)];
    let rest = Rest::of(&warm, 2000, &half(2000));
    assert_eq!(
        (rest.early_bytes, rest.late_bytes, rest.in_flight_bytes),
        (2000, 0, 1000)
    );
    assert!(rest.settled());
    let little = Rest {
        allocations: MIN_SETTLED_ALLOCATIONS - 1,
        ..rest
    };
    assert!(!little.settled(), "too little activity to tell");
    // A cache that keeps its newest 16 entries: all late, none growing.
    let newest: Vec<(Block, bool)> = (0..16).map(|i| nth(1700 + i * 10, 1000)).collect();
    assert!(Rest::of(&newest, 2000, &half(16_000)).settled());
    // A block kept per request, all along: twice what was live at half-way.
    let growing: Vec<(Block, bool)> = (1..=20).map(|i| nth(i * 95, 1000)).collect();
    assert!(!Rest::of(&growing, 2000, &half(10_000)).settled());
}

#[test]
fn steady_growth_is_a_candidate_and_a_step_is_not() {
    let s = 1_000_000_000;
    let mut steady: Vec<(u64, u64)> = (0..20).map(|i| (i * s, 100)).collect();
    let (slope, r2) = growth(&mut steady, 1e9);
    assert!((slope - 100.0).abs() < 1.0, "{slope}");
    assert!(r2 > 0.99, "{r2}");
    let mut step: Vec<(u64, u64)> = (0..20).map(|_| (5 * s, 100)).collect();
    assert_eq!(growth(&mut step, 1e9), (0.0, 0.0));
}

/// From samples, a rest of a sample or two is judged by what its stacks
/// freed: one alive of 2400 allocated there (a cache of the newest 16) is
/// bounded; five alive of five (a leak seen five times) is not yet anything.
#[test]
fn a_sampled_rest_of_few_samples_is_judged_by_what_its_stacks_freed() {
    let base = Rest {
        allocations: 1000,
        sampled: true,
        ..Rest::default()
    };
    let cache = Rest {
        survivors: 1,
        surviving_blocks: 16,
        allocated_at_survivors: 2400,
        early_bytes: 16_384,
        ..base
    };
    assert!(cache.enough_survivors() && cache.settled());
    let leak = Rest {
        survivors: 5,
        surviving_blocks: 2560,
        allocated_at_survivors: 2560,
        early_bytes: 5 << 20,
        ..base
    };
    assert!(!leak.enough_survivors() && !leak.settled());
    // A map's first table, one sample allocated once: too little to be a leak.
    let table = Rest {
        survivors: 1,
        surviving_blocks: 8,
        allocated_at_survivors: 8,
        early_bytes: 8_740,
        ..base
    };
    assert!(table.enough_survivors() && table.settled());
}

/// A block past the sampling mean is recorded nearly every time: one such
/// table alive, allocated once, is judged as in a recording of every call,
/// not as a sample too few (the cache server's fix in CI).
#[test]
fn a_block_recorded_nearly_always_is_no_stand_in() {
    let table = Block {
        weight: 1.56,
        ..block(10, 16_926, Some(1))
    };
    let samples = half_way(500, 26_000);
    let rest = Rest::of(&[(table, false)], 1000, &samples);
    assert!(!rest.sampled && rest.enough_survivors() && rest.settled());
    // A block's `size` is the bytes it stands for: 16 blocks of 4 KiB.
    let stand_in = Block {
        weight: 16.0,
        ..block(10, 16 * 4096, Some(2))
    };
    let live = [(stand_in, false)];
    let mut rest = Rest::of(&live, 1000, &samples);
    rest.weigh_survivors(&live, |_| 16.0);
    assert!(rest.sampled && !rest.enough_survivors());
}
