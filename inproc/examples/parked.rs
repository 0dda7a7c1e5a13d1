//! The in-process mode on a tokio server's tasks: a program that spawns 200
//! tasks from one function (`subscribe`), each holding 2 KiB and waiting for
//! an update; `parked OUT.lsrec` never sends one (the leak), `parked
//! OUT.lsrec --fixed` ends each task at once. Tasks are seen only in a build
//! with `RUSTFLAGS="--cfg tokio_unstable"` (tokio then makes a `tracing` span
//! per task); `fixtures/tests/inproc_tasks.rs` builds it both ways.

use tracing_subscriber::layer::SubscriberExt as _;

#[global_allocator]
static ALLOC: leakscope_inproc::Alloc = leakscope_inproc::Alloc;

/// The spawn site: a task that keeps a buffer until `done` fires.
#[inline(never)]
fn subscribe(i: usize, done: tokio::sync::oneshot::Receiver<()>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let buffer = std::hint::black_box(vec![(i % 251) as u8; 2048]);
        let _ = done.await;
        std::hint::black_box(&buffer);
    })
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let out = args.next().unwrap_or_else(|| "parked.lsrec".into());
    let fixed = args.next().as_deref() == Some("--fixed");
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(leakscope_inproc::SessionLayer::default()),
    )?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let guard = leakscope_inproc::start(&out)?;
    let senders = runtime.block_on(async {
        let mut senders = Vec::new();
        for i in 0..200 {
            let (send, done) = tokio::sync::oneshot::channel();
            let task = subscribe(i, done);
            if fixed {
                drop(send);
                task.await.unwrap();
            } else {
                senders.push(send);
                tokio::task::yield_now().await;
            }
        }
        // Long enough for the parked ones to be parked.
        tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
        senders
    });
    drop(guard);
    drop(senders);
    Ok(())
}
