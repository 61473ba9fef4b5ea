//! KV traffic on the real NIXL runtime for the tests that read the data
//! path's series from a live Prometheus: two NIXL agents in this process
//! (UCX, DRAM), observed by an `Observer`, writing to each other and
//! retrying a peer that was never added, the way a decode worker retries a
//! dead prefill, until dropped.

use nixl_agent::{Descriptor, Observer};
use nixl_sys::{Agent, XferDescList, XferOp, XferStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const LEN: usize = 64 << 10;

pub struct Traffic {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A NIXL agent as a serving process makes one: the UCX backend.
pub fn agent(name: &str) -> (Agent, nixl_sys::Backend) {
    nixl_agent::load_nixl(Some(&super::nixl_lib_dir())).expect("NIXL runtime from the wheel");
    let agent = Agent::new(name).expect("NIXL agent");
    let (_, params) = agent.get_plugin_params("UCX").expect("UCX plugin");
    let backend = agent.create_backend("UCX", &params).expect("UCX backend");
    (agent, backend)
}

/// One DRAM descriptor over `buf`.
pub fn dlist(buf: &[u8]) -> XferDescList<'static> {
    let mut l = XferDescList::new(nixl_sys::MemType::Dram).unwrap();
    l.add_desc(buf.as_ptr() as usize, buf.len(), 0);
    l
}

/// Starts the traffic on `observer`; returns once one transfer completed,
/// one failed and one peer was added.
pub fn start(observer: &Observer) -> Traffic {
    let observer = observer.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let flag = stop.clone();
    let thread = std::thread::spawn(move || {
        let (a, _ba) = agent("traffic-prefill");
        let (b, _bb) = agent("traffic-decode");
        let src = vec![7u8; LEN];
        let dst = vec![0u8; LEN];
        let _ra = a.register_memory(&Descriptor::host(&src), None).unwrap();
        let _rb = b.register_memory(&Descriptor::host(&dst), None).unwrap();
        let on_a = observer.agent(&a);
        on_a.load_remote_md(&b.get_local_md().unwrap()).unwrap();
        let mut ready = Some(ready_tx);
        while !flag.load(Ordering::Relaxed) {
            let req = on_a
                .create_xfer_req(XferOp::Write, &dlist(&src), &dlist(&dst), "traffic-decode", None)
                .unwrap();
            let t0 = Instant::now();
            if on_a.post_xfer_req(&req, None).unwrap() {
                while on_a.get_xfer_status(&req).unwrap() != XferStatus::Success {
                    assert!(t0.elapsed() < Duration::from_secs(20), "transfer did not complete");
                    std::thread::yield_now();
                }
            }
            drop(req);
            let _ = on_a.create_xfer_req(XferOp::Write, &dlist(&src), &dlist(&dst), "gone-peer", None);
            if let Some(tx) = ready.take() {
                let _ = tx.send(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    ready_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the traffic started");
    Traffic {
        stop,
        thread: Some(thread),
    }
}
