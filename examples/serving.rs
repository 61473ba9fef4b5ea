//! A miniature serving process that embeds nixl-agent (docs/embedding.md).
//!
//! It owns a NIXL agent (`prefill-0`) and its KV cache and aux buffers, hands
//! them to nixl-agent's lifecycle on that same agent, serves nixl-agent's
//! routes from its own axum server next to its own `/generate`, moves KV
//! bytes to a peer (`decode-0`, in-process here) with the very registrations
//! nixl-agent reports, and on SIGTERM drains before freeing its buffers.
//!
//! With `observe`, the process makes its registration calls itself (as
//! Dynamo's block manager does) and nixl-agent records them instead.
//!
//! ```text
//! cargo run --example serving                # NIXL from NIXL_LIB_DIR or the wheel
//! cargo run --example serving -- observe
//! curl localhost:<port>/readyz ; curl localhost:<port>/metrics
//! kill -TERM <pid>
//! ```

use axum::routing::get;
use nixl_agent::{
    Config, Descriptor, Expected, GroupSpec, Kind, Lifecycle, MemType, ObserveSettings, ObservedAgent,
    ObservedRegistration, Observer, Plan, Region,
};
use nixl_sys::{Agent, OptArgs, XferDescList, XferOp, XferStatus};
use std::time::{Duration, Instant};

const BLOCK: usize = 64 << 10;
const BLOCKS: usize = 4;
const AUX: usize = 4 << 10;

type Error = Box<dyn std::error::Error>;

/// The serving process's NIXL agent, as SGLang or Dynamo create theirs.
fn nixl_agent(name: &str) -> Result<Agent, Error> {
    let agent = Agent::new(name)?;
    let (_, params) = agent.get_plugin_params("UCX")?;
    agent.create_backend("UCX", &params)?;
    Ok(agent)
}

fn dlist(addr: usize, len: usize) -> Result<XferDescList<'static>, Error> {
    let mut l = XferDescList::new(nixl_sys::MemType::Dram)?;
    l.add_desc(addr, len, 0);
    Ok(l)
}

/// One NIXL transfer from `agent`, waited for; the request is dropped after.
fn transfer(agent: &Agent, op: XferOp, local: &[u8], remote: &[u8], peer: &str) -> Result<(), Error> {
    let local = dlist(local.as_ptr() as usize, local.len())?;
    let remote = dlist(remote.as_ptr() as usize, remote.len())?;
    let req = agent.create_xfer_req(op, &local, &remote, peer, None)?;
    let t0 = Instant::now();
    if agent.post_xfer_req(&req, None)? {
        while agent.get_xfer_status(&req)? != XferStatus::Success {
            if t0.elapsed() > Duration::from_secs(20) {
                return Err("transfer did not complete".into());
            }
            std::thread::yield_now();
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    // Load NIXL before the first nixl-sys call (nixl-sys aborts otherwise),
    // and tell NIXL where its plugins are while this is the only thread.
    let lib_dir = std::env::var_os("NIXL_LIB_DIR").map(std::path::PathBuf::from);
    let runtime = nixl_agent::load_nixl(lib_dir.as_deref()).map_err(|e| e.message)?;
    if std::env::var_os("NIXL_PLUGIN_DIR").is_none() {
        if let Some(dir) = &runtime.plugin_dir {
            std::env::set_var("NIXL_PLUGIN_DIR", dir);
        }
    }
    let agent = nixl_agent("prefill-0")?;

    // The serving process's own memory.
    let mut kv: Vec<u8> = (0..BLOCK * BLOCKS).map(|i| (i % 251) as u8).collect();
    let mut aux = vec![0u8; AUX];
    let observe = std::env::args().nth(1).as_deref() == Some("observe");
    let (app, done) = if observe {
        observed(&agent, &kv, &aux)?
    } else {
        lifecycle(&agent, &kv, &aux, lib_dir).await?
    };

    // The process's own HTTP server, with nixl-agent's routes mounted.
    let app = axum::Router::new()
        .route("/generate", get(|| async { "generated\n" }))
        .merge(app);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening http://{}", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
    });

    // A peer (a decode worker; in-process here) and a KV transfer over the
    // registrations nixl-agent reports.
    let peer = nixl_agent("decode-0")?;
    let peer_buf = vec![0u8; BLOCK];
    let mut peer_opts = OptArgs::new()?;
    peer_opts.add_backend(&peer.get_backend("UCX").ok_or("peer backend")?)?;
    let peer_reg = peer.register_memory(&Descriptor::host(&peer_buf), Some(&peer_opts))?;
    peer.load_remote_md(&agent.get_local_md()?)?;
    let peer_name = agent.load_remote_md(&peer.get_local_md()?)?;
    transfer(&agent, XferOp::Write, &kv[..BLOCK], &peer_buf, &peer_name)?;
    transfer(&agent, XferOp::Read, &aux, &peer_buf[..AUX], &peer_name)?;
    let same = peer_buf[..] == kv[..BLOCK] && aux[..] == kv[..AUX];
    println!("transferred write_bytes={BLOCK} read_bytes={AUX} match={same}");
    if !same {
        return Err("transferred bytes differ".into());
    }

    // Serve until SIGTERM, then drain before the buffers go.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    term.recv().await;
    let (deregistered, still_registered) = match done {
        Drain::Lifecycle(running) => {
            let report = running.shutdown().await?;
            (report.deregistered, report.still_registered.len())
        }
        Drain::Observed(_on_agent, mut handles) => {
            let mut n = 0;
            // Newest first; dropping a registration would deregister it,
            // recorded, as well.
            for handle in handles.iter_mut().rev() {
                handle.deregister()?;
                n += 1;
            }
            (n, 0)
        }
    };
    let _ = stop.send(());
    let _ = server.await;
    let refused = agent
        .create_xfer_req(
            XferOp::Write,
            &dlist(kv.as_ptr() as usize, BLOCK)?,
            &dlist(peer_buf.as_ptr() as usize, BLOCK)?,
            &peer_name,
            None,
        )
        .is_err();
    println!(
        "drained deregistered={deregistered} still_registered={still_registered} nixl_refuses_drained_kv={refused}"
    );
    drop(peer_reg);
    // Only now may the buffers be reused or freed.
    kv.fill(0);
    aux.fill(0);
    Ok(())
}

/// What must be drained before the buffers go.
enum Drain {
    Lifecycle(Box<nixl_agent::LifecycleHandle>),
    Observed(ObservedAgent, Vec<ObservedRegistration>),
}

/// Lifecycle mode: nixl-agent registers the plan on the process's agent.
async fn lifecycle(
    agent: &Agent,
    kv: &[u8],
    aux: &[u8],
    lib_dir: Option<std::path::PathBuf>,
) -> Result<(axum::Router, Drain), Error> {
    let blocks: Vec<Region> = kv
        .chunks(BLOCK)
        .map(|b| Region::new(b.as_ptr() as usize, b.len(), 0))
        .collect();
    let plan = Plan {
        groups: vec![
            GroupSpec::provided("kv", Kind::Kv, MemType::Dram, blocks),
            GroupSpec::provided(
                "aux",
                Kind::Aux,
                MemType::Dram,
                vec![Region::new(aux.as_ptr() as usize, aux.len(), 0)],
            ),
        ],
    };
    // nixl-agent registers on `agent`, and serves nothing of its own.
    let config = Config {
        nixl_lib_dir: lib_dir,
        ..Config::default()
    };
    let running = Lifecycle::prepare(config, plan)?
        .on_agent(agent.clone())
        .without_server()
        .start()
        .await?;
    if !running.wait_ready(Duration::from_secs(30)).await {
        return Err(format!("not ready: {:?}", running.status().groups).into());
    }
    Ok((running.router(), Drain::Lifecycle(Box::new(running))))
}

/// Observe mode: the process registers through its own agent; nixl-agent
/// records each call and hands back what nixl-sys returned.
fn observed(agent: &Agent, kv: &[u8], aux: &[u8]) -> Result<(axum::Router, Drain), Error> {
    let observer = Observer::new(ObserveSettings {
        expect: vec![Expected::new("kv", Kind::Kv), Expected::new("aux", Kind::Aux)],
        ..ObserveSettings::default()
    });
    let mut opts = OptArgs::new()?;
    opts.add_backend(&agent.get_backend("UCX").ok_or("no UCX backend")?)?;
    // The agent is an identity of the recording: deregistration finds the
    // registration made on it, and dropping `on_agent` releases its holdings.
    let on_agent = observer.agent(agent);
    let mut handles = Vec::new();
    let buffers = kv
        .chunks(BLOCK)
        .map(|b| ("kv", Kind::Kv, b))
        .chain([("aux", Kind::Aux, aux)]);
    for (group, kind, buf) in buffers {
        let desc = Descriptor::host(buf);
        handles.push(on_agent.register(group, kind, &desc, Some(&opts))?);
    }
    if !observer.status().ready {
        return Err(format!("not ready: {:?}", observer.status().groups).into());
    }
    Ok((observer.router(), Drain::Observed(on_agent, handles)))
}
