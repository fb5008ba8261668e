//! Black-box tests of the whole server over real sockets on loopback: the real server on port 0,
//! real callback servers, and (for sessions) a real websocket peer.

mod helpers;

mod smoke;
