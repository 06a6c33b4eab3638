//! The PostgreSQL store against a real server, with two or three workers (each a runtime with its own store,
//! its own connections, its own worker id) in this process: sessions that move between workers, claim races,
//! steering and stops across workers, lost leases, takeover of a dead worker's turn, and bad configuration.
//! The multi-process tests (real worker processes, kill -9) are in `noetic-cli/tests/serve_postgres.rs`.
//!
//! Needs a server: `scripts/postgres.sh setup && scripts/postgres.sh start` (URL from `NOETIC_POSTGRES_URL`, by
//! default the script's). Without one these tests say so and pass, unless `NOETIC_E2E_REQUIRED=1` (as in CI).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::IntoFuture;
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use noetic::agent::{LayerStateWrite, Routed, SessionError, SessionStore, SteerMessage, TurnLease};
use noetic::model::{ModelResponse, ScriptedModel, ToolResult};
use noetic::prelude::*;
use noetic::testing::{Counter, Gate};
use noetic_postgres::{PgOptions, PgStore};
use serde_json::json;

const DEFAULT_URL: &str = "postgres://noetic:noetic@127.0.0.1:54329/noetic";

/// The server's URL, or `None` (with the reason printed) when there is none and it is not required.
fn url() -> Option<String> {
    let url = std::env::var("NOETIC_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let probe = url.clone();
    // The synchronous client may not run on a thread that drives async tasks.
    match std::thread::spawn(move || postgres::Client::connect(&probe, postgres::NoTls).map(drop)).join().unwrap() {
        Ok(_) => Some(url),
        Err(e) if std::env::var("NOETIC_E2E_REQUIRED").is_ok_and(|v| v == "1") => {
            panic!("PostgreSQL is required (NOETIC_E2E_REQUIRED=1) but {url} is unreachable: {e}")
        }
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "skipped: no PostgreSQL at {url} ({e}); run scripts/postgres.sh setup && scripts/postgres.sh start"
            );
            None
        }
    }
}

fn worker(url: &str) -> Arc<PgStore> {
    Arc::new(PgStore::connect_with(url, PgOptions { lease: Duration::from_secs(3), ..PgOptions::default() }).unwrap())
}

/// A session key no other test (or earlier run) uses.
fn key(name: &str) -> String {
    format!("{name}-{}-{:08x}", std::process::id(), fastrand_u32())
}

fn fastrand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64);
    h.finish() as u32
}

/// The turn's outcome, or a failure after 30 s (a turn that missed its stop or its steering would otherwise wait
/// on its gated tool for ever).
async fn within(turn: Turn) -> Result<String, NoeticError> {
    tokio::time::timeout(Duration::from_secs(30), turn.into_future()).await.expect("the turn ended within 30 s")
}

/// Waits (10 s at most) until `store`'s worker was notified of something for `key`: a checkpoint reached before
/// the notification arrives reads nothing (the following one does), so a test lets its turn reach one only then.
async fn notified(store: &PgStore, key: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !store.has_news(key) {
        assert!(std::time::Instant::now() < deadline, "no notification for {key} within 10 s");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Runs `sql` with `key` as `$1` on a connection of its own (on a thread of its own: the synchronous client may
/// not run on one that drives async tasks).
fn admin(url: &str, sql: &'static str, key: &str) {
    let (url, key) = (url.to_owned(), key.to_owned());
    std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        assert_eq!(client.execute(sql, &[&key]).unwrap(), 1);
    })
    .join()
    .unwrap();
}

fn runtime(model: &ScriptedModel, store: Arc<PgStore>, tools: Vec<Arc<dyn Tool>>) -> Runtime {
    Runtime::builder().model(Arc::new(model.clone())).tools(tools).store(store).build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_moves_between_workers_turn_by_turn_and_each_sees_the_others_turns() {
    let Some(url) = url() else { return };
    let k = key("moves");
    let a = runtime(&ScriptedModel::new([ModelResponse::text("one")]), worker(&url), Vec::new());
    let b = runtime(&ScriptedModel::new([ModelResponse::text("two")]), worker(&url), Vec::new());
    let a_session = a.session(&k);
    assert_eq!(a_session.send("first").await.unwrap().await.unwrap(), "one");
    // B opened nothing yet: it reads the session, and its turn continues A's conversation.
    let b_session = b.session(&k);
    assert_eq!(b_session.send("second").await.unwrap().await.unwrap(), "two");
    let expected = vec![Item::user("first"), Item::assistant("one"), Item::user("second"), Item::assistant("two")];
    assert_eq!(b_session.history(), expected);
    // A still holds its old copy in memory; its next turn reads B's turn first (and the turn count with it).
    let model = ScriptedModel::new([ModelResponse::text("three")]);
    let a2 = runtime(&model, worker(&url), Vec::new());
    let a2_session = a2.session(&k);
    assert_eq!(a2_session.send("third").await.unwrap().await.unwrap(), "three");
    assert_eq!(model.requests()[0].history.len(), 5, "the model saw both earlier turns");
    assert_eq!(a_session.turns(), 1, "A's copy is stale until A starts a turn");
    let a_model = ScriptedModel::new([ModelResponse::text("four")]);
    drop(a);
    let a = runtime(&a_model, worker(&url), Vec::new());
    let s = a.session(&k);
    assert_eq!(s.send("fourth").await.unwrap().await.unwrap(), "four");
    assert_eq!(s.turns(), 4);
    assert_eq!(s.history().len(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_copy_is_refreshed_when_its_worker_starts_the_next_turn() {
    let Some(url) = url() else { return };
    let k = key("stale");
    let model_a = ScriptedModel::new([ModelResponse::text("a1"), ModelResponse::text("a2")]);
    let a = runtime(&model_a, worker(&url), Vec::new());
    let b = runtime(&ScriptedModel::new([ModelResponse::text("b1")]), worker(&url), Vec::new());
    let sa = a.session(&k);
    sa.send("x").await.unwrap().await.unwrap();
    b.session(&k).send("y").await.unwrap().await.unwrap();
    assert_eq!(sa.history().len(), 2, "A has not looked yet");
    sa.send("z").await.unwrap().await.unwrap();
    assert_eq!(model_a.requests()[1].history.len(), 5, "A's second turn saw B's turn");
    assert_eq!(sa.history().len(), 6);
    assert_eq!(sa.turns(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_messages_for_one_idle_session_through_three_workers_start_one_turn_and_steer_the_rest() {
    let Some(url) = url() else { return };
    let k = key("race");
    let gate = Gate::new();
    // One checkpoint takes one message: a model answer per message, at most.
    let mut script = vec![ModelResponse::tool_calls([("c1", "work", json!({}))])];
    script.extend((0..12).map(|i| ModelResponse::text(format!("answer {i}"))));
    let model = ScriptedModel::new(script);
    let workers: Vec<Runtime> =
        (0..3).map(|_| runtime(&model, worker(&url), vec![gate.tool("work").unwrap()])).collect();
    let sessions: Vec<Session> = workers.iter().map(|w| w.session(&k)).collect();
    let mut tasks = Vec::new();
    for i in 0..12 {
        let session = sessions[i % 3].clone();
        tasks.push(tokio::spawn(async move { (i, session.send_or_steer(format!("message {i}")).await.unwrap()) }));
    }
    let mut started = Vec::new();
    let mut steered = 0;
    for task in tasks {
        match task.await.unwrap() {
            (i, Routed::Started(turn)) => started.push((i, turn)),
            (_, Routed::Steered(_)) => steered += 1,
        }
    }
    assert_eq!(started.len(), 1, "exactly one turn started");
    assert_eq!(steered, 11);
    gate.started().await;
    gate.release();
    let (first, turn) = started.pop().unwrap();
    turn.await.unwrap();
    // Every message is in the conversation exactly once, after the first (steered ones at the checkpoint, or
    // queued for the next turn if they came after it).
    let owner = &sessions[first % 3];
    while let Some(next) = owner.continue_session().await.unwrap() {
        next.await.unwrap();
    }
    let history = owner.history();
    for i in 0..12 {
        let n = history.iter().filter(|item| **item == Item::user(format!("message {i}"))).count();
        assert_eq!(n, 1, "message {i} appears {n} times in {history:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_through_worker_b_reaches_the_turn_on_worker_a_at_its_next_checkpoint() {
    let Some(url) = url() else { return };
    let k = key("steer");
    let gate = Gate::new();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "build", json!({})), ("c2", "build", json!({}))]),
        ModelResponse::text("switched to the docs"),
    ]);
    let a_store = worker(&url);
    let a = runtime(&model, a_store.clone(), vec![gate.tool("build").unwrap()]);
    let b = runtime(&ScriptedModel::new([]), worker(&url), vec![Gate::new().tool("build").unwrap()]);
    let turn = a.session(&k).send("build everything").await.unwrap();
    gate.started().await;
    let Routed::Steered(_) = b.session(&k).send_or_steer("only the docs, please").await.unwrap() else {
        panic!("B must steer A's turn, not start its own")
    };
    assert!(matches!(b.session(&k).send("direct").await, Err(SessionError::BusyElsewhere { .. })));
    notified(&a_store, &k).await;
    gate.release();
    assert_eq!(within(turn).await.unwrap(), "switched to the docs");
    assert_eq!(gate.runs(), 1, "the rest of the batch was skipped, as for a local steer");
    let second = model.requests()[1].history.clone();
    assert_eq!(second.last(), Some(&Item::user("only the docs, please")));
    let history = a.session(&k).history();
    assert_eq!(history.iter().filter(|i| **i == Item::user("only the docs, please")).count(), 1);
    assert!(a.session(&k).queued_messages().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_through_worker_b_cancels_the_turn_on_worker_a() {
    let Some(url) = url() else { return };
    let k = key("stop");
    let gate = Gate::new();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "build", json!({})), ("c2", "build", json!({}))]),
        ModelResponse::text("never asked"),
    ]);
    let a_store = worker(&url);
    let a = runtime(&model, a_store.clone(), vec![gate.tool("build").unwrap()]);
    let b = runtime(&ScriptedModel::new([]), worker(&url), Vec::new());
    let turn = a.session(&k).send("build").await.unwrap();
    gate.started().await;
    let (_, cancelled) = b.session(&k).stop("stopped through worker B").await;
    assert!(cancelled, "B reports the turn it stopped elsewhere");
    notified(&a_store, &k).await;
    gate.release();
    let error = within(turn).await.unwrap_err();
    assert!(error.to_string().contains("stopped through worker B"), "{error}");
    assert_eq!((model.calls(), gate.runs()), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_whose_lease_was_taken_stops_at_its_next_checkpoint_and_writes_nothing_more() {
    let Some(url) = url() else { return };
    let k = key("lost");
    let gate = Gate::new();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "build", json!({})), ("c2", "build", json!({}))]),
        ModelResponse::text("never asked"),
    ]);
    let store = worker(&url);
    let a = runtime(&model, store.clone(), vec![gate.tool("build").unwrap()]);
    let turn = a.session(&k).send("build").await.unwrap();
    gate.started().await;
    let before = store.peek(&k).unwrap().unwrap().snapshot.history.len();
    // Another worker takes the session (as after A's lease expired).
    admin(
        &url,
        "UPDATE noetic_sessions SET owner = 'usurper', lease_until = now() + interval '1 minute' WHERE key = $1",
        &k,
    );
    // The turn's next commit (after the running tool) is refused, and its next checkpoint stops it.
    gate.release();
    assert!(turn.await.is_err(), "the turn stops");
    assert_eq!(model.calls(), 1, "the model is not asked again");
    assert_eq!(gate.runs(), 1, "the rest of the batch does not run");
    assert_eq!(store.peek(&k).unwrap().unwrap().snapshot.history.len(), before, "nothing more written");
    assert_eq!(store.lease_holder(&k).unwrap().as_deref(), Some("usurper"), "the lease stays with its new holder");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_left_by_a_dead_worker_is_taken_over_without_rerunning_its_completed_tool_call() {
    let Some(url) = url() else { return };
    let k = key("takeover");
    let gate = Gate::new();
    let quick = Counter::new();
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "quick", json!({})), ("c2", "slow", json!({}))])]);
    let dead = runtime(&model, worker(&url), vec![quick.tool("quick", json!(1)).unwrap(), gate.tool("slow").unwrap()]);
    let _turn = dead.session(&k).send("go").await.unwrap();
    gate.started().await;
    // The worker "dies": its lease runs out and nobody renews it.
    admin(
        &url,
        "UPDATE noetic_sessions SET owner = 'dead-worker', lease_until = now() - interval '1 second' WHERE key = $1",
        &k,
    );
    let survivor_store = worker(&url);
    assert!(survivor_store.orphaned().unwrap().contains(&k), "listed for takeover");
    let quick2 = Counter::new();
    let model2 = ScriptedModel::new([ModelResponse::text("recovered")]);
    let survivor = runtime(
        &model2,
        survivor_store.clone(),
        vec![quick2.tool("quick", json!(2)).unwrap(), Gate::new().tool("slow").unwrap()],
    );
    let session = survivor.session(&k);
    let resumed = session.resume().await.unwrap().expect("an unfinished turn to resume");
    assert_eq!(resumed.await.unwrap(), "recovered");
    assert_eq!((model2.calls(), quick2.count()), (1, 0), "no model call and no completed tool call repeated");
    let results: Vec<ToolResult> = session
        .history()
        .into_iter()
        .filter_map(|i| match i {
            Item::ToolResult(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(results.iter().map(|r| r.call_id.as_str()).collect::<Vec<_>>(), ["c1", "c2"], "one result per call");
    assert!(!survivor_store.orphaned().unwrap().contains(&k));
    // The dead worker's tool finishing late changes nothing stored.
    gate.release();
    assert_eq!(survivor_store.peek(&k).unwrap().unwrap().snapshot.history, session.history());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_one_worker_wins_the_lease_of_an_idle_session() {
    let Some(url) = url() else { return };
    let k = key("lease");
    let (a, b) = (worker(&url), worker(&url));
    assert_eq!(a.begin_turn(&k).unwrap(), TurnLease::Granted { refreshed: None });
    assert_eq!(b.begin_turn(&k).unwrap(), TurnLease::Elsewhere { owner: a.worker_id().to_owned() });
    let message = SteerMessage::new("for A's turn");
    assert!(matches!(b.begin_turn_or_queue(&k, &message).unwrap(), TurnLease::Elsewhere { .. }));
    // A's turn ends without having reached a checkpoint: the message comes back with the lease's release.
    assert_eq!(a.end_turn(&k).unwrap().messages, vec![message]);
    assert!(matches!(b.begin_turn(&k).unwrap(), TurnLease::Granted { refreshed: Some(_) }));
    assert_eq!(b.lease_holder(&k).unwrap().as_deref(), Some(b.worker_id()));
    b.end_turn(&k).unwrap();
    assert_eq!(b.lease_holder(&k).unwrap(), None);
}

#[test]
fn bad_urls_and_unreachable_servers_are_typed_errors_that_say_what_to_do() {
    let e = PgStore::connect("not a url at all").unwrap_err().to_string();
    assert!(e.contains("not a PostgreSQL URL"), "{e}");
    let e = PgStore::connect_with(
        "postgres://noetic:secret-pw@127.0.0.1:1/noetic",
        PgOptions { connect_timeout: Duration::from_secs(2), ..PgOptions::default() },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("connecting failed") && e.contains("check that the server is up"), "{e}");
    assert!(!e.contains("secret-pw"), "the password is never shown: {e}");
    let Some(url) = url() else { return };
    let wrong = url.replace("noetic:noetic@", "noetic:wrong@");
    let e = PgStore::connect(&wrong).unwrap_err().to_string();
    assert!(e.contains("credentials") || e.contains("password"), "{e}");
}

#[test]
fn a_database_from_a_newer_schema_is_refused_and_left_untouched() {
    let Some(url) = url() else { return };
    let store = PgStore::connect(&url).unwrap();
    assert_eq!(store.schema_version().unwrap(), noetic_postgres::SCHEMA_VERSION);
    // A separate database, so the shared one stays usable by the other tests.
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let db = format!("noetic_newer_{}", std::process::id());
    let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db}"));
    admin.batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
    let other_url = format!("{}/{db}", url.rsplit_once('/').unwrap().0);
    let mut other = postgres::Client::connect(&other_url, postgres::NoTls).unwrap();
    other
        .batch_execute("CREATE TABLE noetic_schema (version INTEGER NOT NULL); INSERT INTO noetic_schema VALUES (99)")
        .unwrap();
    let e = PgStore::connect(&other_url).unwrap_err().to_string();
    assert!(e.contains("version 99") && e.contains("nothing was changed"), "{e}");
    // Also refused, not a panic, when connecting from inside an async runtime (as a server does).
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
    let e = rt.block_on(async { PgStore::connect(&other_url).unwrap_err().to_string() });
    assert!(e.contains("version 99"), "{e}");
    drop(rt);
    let tables: i64 = other
        .query_one("SELECT COUNT(*) FROM information_schema.tables WHERE table_name LIKE 'noetic_%'", &[])
        .unwrap()
        .get(0);
    assert_eq!(tables, 1, "only the version table");
    drop(other);
    admin.batch_execute(&format!("DROP DATABASE {db}")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_the_server_drops_mid_turn_are_made_again_and_nothing_is_lost_or_repeated() {
    let Some(url) = url() else { return };
    let k = key("dropped");
    let gate = Gate::new();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "build", json!({}))]),
        ModelResponse::text("built"),
        ModelResponse::text("still here"),
    ]);
    let store = worker(&url);
    let a = runtime(&model, store.clone(), vec![gate.tool("build").unwrap()]);
    let session = a.session(&k);
    let turn = session.send("build").await.unwrap();
    gate.started().await;
    // The server drops every connection of this worker (as a restart or a network cut would).
    let (admin_url, name) = (url.clone(), format!("noetic {}", store.worker_id()));
    let dropped = std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&admin_url, postgres::NoTls).unwrap();
        client
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
                &[&name.chars().take(63).collect::<String>()],
            )
            .unwrap()
            .len()
    })
    .join()
    .unwrap();
    assert!(dropped >= 2, "the pool's and the listener's connections were dropped ({dropped})");
    gate.release();
    // A connection found dropped before its transaction changed anything is made again and the transaction run on
    // it; were the turn to fail anyway, it must be with a typed store error.
    if let Err(e) = turn.await {
        let text = e.to_string();
        assert!(text.contains("session store postgres://") && text.contains("failed"), "{text}");
    }
    assert_eq!(gate.runs(), 1, "the tool ran once");
    // Reconnected: the next turn works, and what is stored has every item once.
    assert_eq!(session.send("again").await.unwrap().await.unwrap(), "still here");
    let stored = store.peek(&k).unwrap().unwrap().snapshot.history;
    assert_eq!(stored, session.history());
    let results = stored.iter().filter(|i| matches!(i, Item::ToolResult(_))).count();
    assert_eq!(results, 1, "one result for the one call: {stored:?}");
}

/// A TCP proxy to the database that a test can cut (every connection through it closed, new ones refused) and
/// restore: a network partition between one worker and the database.
struct Partition {
    port: u16,
    cut: Arc<std::sync::atomic::AtomicBool>,
    generation: Arc<std::sync::atomic::AtomicU64>,
}

impl Partition {
    async fn start(target: std::net::SocketAddr) -> Partition {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let generation = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (cut2, generation2) = (cut.clone(), generation.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else { return };
                if cut2.load(Ordering::SeqCst) {
                    continue; // dropped: refused
                }
                let born = generation2.load(Ordering::SeqCst);
                let generation = generation2.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await else { return };
                    let copy = tokio::io::copy_bidirectional(&mut inbound, &mut outbound);
                    let severed = async {
                        while generation.load(Ordering::SeqCst) == born {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    };
                    tokio::select! {
                        _ = copy => {}
                        () = severed => {}
                    }
                });
            }
        });
        Partition { port, cut, generation }
    }

    fn sever(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        self.generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    fn heal(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cut_off_from_the_database_past_its_lease_stops_its_turn_and_the_new_holder_keeps_the_session() {
    let Some(url) = url() else { return };
    let k = key("partition");
    let config: postgres::Config = url.parse().unwrap();
    let host = match &config.get_hosts()[0] {
        postgres::config::Host::Tcp(h) => h.clone(),
        _ => panic!("a TCP URL"),
    };
    let target = tokio::net::lookup_host((host.as_str(), config.get_ports()[0])).await.unwrap().next().unwrap();
    let partition = Partition::start(target).await;
    let via_proxy = url.replace(&format!(":{}/", config.get_ports()[0]), &format!(":{}/", partition.port));
    assert_ne!(via_proxy, url);
    let options = PgOptions {
        lease: Duration::from_millis(900),
        connect_timeout: Duration::from_millis(300),
        ..PgOptions::default()
    };
    let cut_off = Arc::new(PgStore::connect_with(&via_proxy, options).unwrap());
    let gate = Gate::new();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "build", json!({})), ("c2", "build", json!({}))]),
        ModelResponse::text("never asked"),
    ]);
    let a = runtime(&model, cut_off.clone(), vec![gate.tool("build").unwrap()]);
    let turn = a.session(&k).send("build").await.unwrap();
    gate.started().await;
    partition.sever();
    // Past the lease, another worker (with its own path to the database) takes the session.
    let other = worker(&url);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let TurnLease::Granted { .. } = other.begin_turn(&k).unwrap() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the cut-off worker's lease never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stored_before = other.peek(&k).unwrap().unwrap().snapshot.history;
    partition.heal();
    gate.release();
    assert!(turn.await.is_err(), "the cut-off worker's turn stops");
    assert_eq!((model.calls(), gate.runs()), (1, 1), "no model call and no tool after the cut");
    assert_eq!(
        other.peek(&k).unwrap().unwrap().snapshot.history,
        stored_before,
        "nothing written beside the new holder"
    );
    assert_eq!(other.lease_holder(&k).unwrap().as_deref(), Some(other.worker_id()));
    other.end_turn(&k).unwrap();
}

#[test]
fn a_version_1_database_is_migrated_with_its_sessions_and_gets_the_layer_state_table() {
    let Some(url) = url() else { return };
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let db = format!("noetic_v1_{}", std::process::id());
    let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db}"));
    admin.batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
    let other_url = format!("{}/{db}", url.rsplit_once('/').unwrap().0);
    let mut other = postgres::Client::connect(&other_url, postgres::NoTls).unwrap();
    noetic_postgres::testing::create_v1(&mut other).unwrap();
    other
        .batch_execute(
            "INSERT INTO noetic_sessions (key, mode, capacity, batch_policy, turns, items)
             VALUES ('kept', 'all', 3, 'finish-batch', 1, 1);
             INSERT INTO noetic_items (session, seq, item)
             VALUES ('kept', 0, '{\"type\":\"message\",\"role\":\"user\",\"content\":\"from v1\"}');",
        )
        .unwrap();
    drop(other);
    let store = PgStore::connect(&other_url).unwrap();
    assert_eq!(store.schema_version().unwrap(), noetic_postgres::SCHEMA_VERSION);
    assert_eq!(store.peek("kept").unwrap().unwrap().snapshot.history, vec![Item::user("from v1")]);
    let write = LayerStateWrite { scope: "thread:kept", layer: "notes", state: Some("{}") };
    store.save_layer_states(&[write]).unwrap();
    assert_eq!(store.layer_states("thread:kept").unwrap(), [("notes".to_owned(), "{}".to_owned())]);
    assert!(store.delete("kept").unwrap());
    assert!(store.layer_states("thread:kept").unwrap().is_empty(), "deleted with its session");
    drop(store);
    admin.batch_execute(&format!("DROP DATABASE {db} WITH (FORCE)")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_layer_state_moves_with_it_between_workers() {
    let Some(url) = url() else { return };
    let k = key("layer-state");
    let layer = || {
        let rule = SteeringRule::predicate("no-t", [Hook::BeforeToolCall], |_| SteeringDecision::deny("not t"));
        steering(SteeringConfig::new([rule]).with_scope(Scope::Thread)).unwrap()
    };
    let run = |layer: &Arc<SteeringLayer>, model: ScriptedModel| {
        let tool = Arc::new(FnTool::builder("t", "A tool.").handler(|_, _| async { Ok(json!(null)) }).build().unwrap());
        Runtime::builder()
            .model(Arc::new(model))
            .tool(tool)
            .layer(layer.clone() as Arc<dyn MemoryLayer>)
            .store(worker(&url))
            .build()
            .unwrap()
    };
    let thread = Context::builder().thread_id(k.clone()).build();
    let denied = |l: &SteeringLayer| {
        l.state_for(&thread).map_or(0, |s| s.ledger.iter().filter(|e| e.rule_id.as_deref() == Some("no-t")).count())
    };
    let deny_turn =
        || ScriptedModel::new([ModelResponse::tool_calls([("c1", "t", json!({}))]), ModelResponse::text("ok")]);
    let (layer_a, layer_b) = (layer(), layer());
    let model_a = deny_turn();
    model_a.push(ModelResponse::tool_calls([("c2", "t", json!({}))]));
    model_a.push(ModelResponse::text("ok"));
    let a = run(&layer_a, model_a);
    let b = run(&layer_b, deny_turn());
    a.session(&k).send("one").await.unwrap().await.unwrap();
    b.session(&k).send("two").await.unwrap().await.unwrap();
    assert_eq!(denied(&layer_b), 2, "B's turn started from A's state");
    // A's session and layer hold a stale copy (one deny); A's next turn reads the session again, and the layers'
    // state with it.
    assert_eq!(denied(&layer_a), 1);
    a.session(&k).send("three").await.unwrap().await.unwrap();
    assert_eq!(denied(&layer_a), 3, "A's turn started from B's state, not its own old copy");
}
