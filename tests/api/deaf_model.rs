//! A realtime model that stops reading: a raw socket that completes the websocket handshake and
//! never reads again.

use std::cell::RefCell;
use std::rc::Rc;

use serde_json::Value;

use crate::fake_realtime::EVENT_DEADLINE;
use crate::sessions::{call_event, response_done};

/// A model that completes the websocket handshake and never reads again, on a socket with a
/// small receive buffer: what the server writes to it piles up in the server. (The fake model
/// cannot do this: actix-web's dispatcher keeps reading a connection whose handler does not.)
/// Its frames to the server are written by hand (server frames are not masked).
pub struct DeafModel {
    pub url: String,
    connections: Rc<RefCell<Vec<actix_web::rt::net::TcpStream>>>,
    accepted: tokio::sync::watch::Receiver<usize>,
}

impl DeafModel {
    pub fn start() -> Self {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("a socket");
        socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
        socket
            .bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .expect("bound");
        socket.listen(16).expect("listening");
        socket.set_nonblocking(true).expect("non-blocking");
        let listener = std::net::TcpListener::from(socket);
        let url = format!("ws://{}/v1/realtime", listener.local_addr().unwrap());
        let listener = actix_web::rt::net::TcpListener::from_std(listener).unwrap();
        let connections = Rc::new(RefCell::new(Vec::new()));
        let (count, accepted) = tokio::sync::watch::channel(0);
        let held = connections.clone();
        actix_web::rt::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                if handshake(&mut stream).await.is_some() {
                    held.borrow_mut().push(stream);
                    count.send_modify(|c| *c += 1);
                }
            }
        });
        Self {
            url,
            connections,
            accepted,
        }
    }

    pub async fn wait_connections(&self, n: usize) {
        let mut accepted = self.accepted.clone();
        let seen = tokio::time::timeout(EVENT_DEADLINE, accepted.wait_for(|c| *c >= n)).await;
        assert!(matches!(seen, Ok(Ok(_))), "no connection #{n}");
    }

    pub fn connections(&self) -> usize {
        *self.accepted.borrow()
    }

    /// Calls `name` with `{}` as response `n` (its call and `response.done`) on the first
    /// connection; false once the server has closed it.
    pub async fn push_call(&self, n: usize, name: &str) -> bool {
        let (call_id, response_id) = (format!("call_{n}"), format!("resp_{n}"));
        self.push(call_event(&response_id, &call_id, name, "{}"))
            .await
            && self
                .push(response_done(&response_id, &[(&call_id, name, "{}")]))
                .await
    }

    /// Writes one event to the first connection; false once the server has closed it.
    pub async fn push(&self, event: Value) -> bool {
        use tokio::io::AsyncWriteExt;
        let text = event.to_string();
        let mut frame = vec![0x81];
        match text.len() {
            n if n < 126 => frame.push(n as u8),
            n if n <= usize::from(u16::MAX) => {
                frame.push(126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        frame.extend_from_slice(text.as_bytes());
        let mut stream = self.connections.borrow_mut().remove(0);
        let written = stream.write_all(&frame).await.is_ok();
        self.connections.borrow_mut().insert(0, stream);
        written
    }
}

/// Reads the client's handshake and accepts it.
async fn handshake(stream: &mut actix_web::rt::net::TcpStream) -> Option<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    let key = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("sec-websocket-key")
            .then(|| value.trim().to_owned())
    })?;
    let accept = actix_http::ws::hash_key(key.as_bytes());
    let response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\n\r\n",
        std::str::from_utf8(&accept).ok()?
    );
    stream.write_all(response.as_bytes()).await.ok()
}
