//! The accept loop over real loopback sockets: slow clients cut off, silent connections closed,
//! the connection bound held, and a real client served all the while.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::{get, post};
use flowbox_door::{Door, Limits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A door with `limits` in front of `/` (answers at once), `/slow` (answers after 3 s) and
/// `/echo` (reads the body), on a free loopback port.
async fn start(limits: Limits) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let router = Router::new()
        .route("/", get(|| async { "hello" }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(3)).await;
                "late"
            }),
        )
        .route("/echo", post(|body: String| async move { body }));
    let door = Door::new().with_limits(limits);
    tokio::spawn(async move {
        flowbox_door::serve(listener, router, &door, std::future::pending())
            .await
            .unwrap();
    });
    address
}

/// A whole GET of `/`, which must answer within 5 s.
async fn served(address: SocketAddr) -> String {
    tokio::time::timeout(Duration::from_secs(5), async {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    })
    .await
    .expect("a real client is served")
}

/// Whether the server closes `stream` within `limit` (end of stream or a reset).
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let mut buffer = [0u8; 1024];
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buffer)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test]
async fn a_client_slow_to_send_its_head_is_cut_off_and_others_are_served() {
    let limits = Limits::default().with_request_timeout(Duration::from_millis(800));
    let address = start(limits).await;
    let mut silent = Vec::new();
    for _ in 0..200 {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        silent.push(stream);
    }
    let mut trickling = TcpStream::connect(address).await.unwrap();
    let trickle = tokio::spawn(async move {
        for byte in b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Slow: "
            .iter()
            .cycle()
            .take(40)
        {
            if trickling.write_all(&[*byte]).await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    });
    assert!(served(address).await.ends_with("hello"));
    for stream in &mut silent {
        assert!(closed_within(stream, Duration::from_secs(10)).await);
    }
    assert!(
        trickle.await.unwrap(),
        "a head trickled a byte at a time is cut off too"
    );
}

#[tokio::test]
async fn a_body_that_trickles_fails_its_request() {
    let limits = Limits::default().with_request_timeout(Duration::from_millis(800));
    let address = start(limits).await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\nabc")
        .await
        .unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    assert!(started.elapsed() < Duration::from_secs(10), "still open");
    let answer = String::from_utf8_lossy(&answer);
    assert!(!answer.contains("200 OK"), "{answer}");
}

#[tokio::test]
async fn a_connection_silent_both_ways_is_closed() {
    let limits = Limits::default().with_idle_timeout(Duration::from_millis(500));
    let address = start(limits).await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /slow HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    assert!(closed_within(&mut stream, Duration::from_secs(2)).await);
    // Within the limit the same request is answered.
    let address = start(Limits::default()).await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /slow HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.ends_with("late"), "{answer}");
}

#[tokio::test]
async fn connections_past_the_bound_wait_until_one_closes() {
    let limits = Limits::default()
        .with_max_connections(10)
        .with_request_timeout(Duration::from_secs(1));
    let address = start(limits).await;
    let mut silent = Vec::new();
    for _ in 0..30 {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        silent.push(stream);
    }
    // The real client waits behind the silent ones, but only until they are cut off.
    assert!(served(address).await.ends_with("hello"));
}

#[tokio::test]
async fn a_request_head_over_64_kib_is_refused_and_others_are_served() {
    let address = start(Limits::default()).await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    let padding = "x".repeat(70 * 1024);
    // The server may answer and close before the whole head is written.
    let _ = stream
        .write_all(
            format!("GET / HTTP/1.1\r\nHost: localhost\r\nX-Pad: {padding}\r\n\r\n").as_bytes(),
        )
        .await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(!answer.contains("hello"), "{answer}");
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "{answer}"
    );
    assert!(served(address).await.ends_with("hello"));
}
