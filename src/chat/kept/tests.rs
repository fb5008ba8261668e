use super::*;

/// A turn found by `keys` (the first its app call's id), handing back that call after `said`,
/// with `server` calls of its own answered.
struct Turn {
    keys: Vec<String>,
    said: String,
    server: usize,
}

fn turn(keys: &[&str], said: &str) -> Turn {
    Turn {
        keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        said: said.into(),
        server: 1,
    }
}

fn back(id: &str, said: &str) -> HandBack {
    HandBack::new(
        vec![AppCall {
            id: id.into(),
            name: "app".into(),
            arguments: "{}".into(),
        }],
        Some(said.into()),
    )
}

impl KeptTurn for Turn {
    fn keys(&self) -> Vec<&str> {
        self.keys.iter().map(String::as_str).collect()
    }

    fn hand_back(&self) -> HandBack {
        back(&self.keys[0], &self.said)
    }

    fn bytes(&self) -> usize {
        self.keys.iter().map(String::len).sum()
    }

    fn lost(&self) -> Option<Lost> {
        let mut calls = vec![(self.keys[0].clone(), false)];
        calls.extend((0..self.server).map(|n| (format!("srv_{n}"), true)));
        Some(Lost {
            response: None,
            calls,
        })
    }
}

fn client(port: u16) -> Option<SocketAddr> {
    Some(SocketAddr::from(([127, 0, 0, 1], port)))
}

fn owner(port: u16) -> Owner {
    Owner {
        client: client(port),
        conversation: None,
    }
}

#[test]
fn turns_are_found_by_their_hand_back_and_their_keys_and_forgotten_with_what_they_lost() {
    let mut store = KeptTurns::default();
    let now = Instant::now();
    store
        .keep(turn(&["call_0", "resp_1"], "hi"), owner(1), now)
        .unwrap();
    store
        .keep(turn(&["call_0", "resp_2"], "bye"), owner(2), now)
        .unwrap();
    let found = store.find_handed(&back("call_0", "hi")).unwrap();
    assert_eq!(found.turn.keys[1], "resp_1");
    assert!(store.find_handed(&back("call_0", "hello")).is_none());
    assert_eq!(store.find("resp_2").unwrap().turn.said, "bye");
    // The most recently used of several turns a key names.
    store.used(&[found.slot], now);
    assert_eq!(store.find("call_0").unwrap().turn.said, "hi");

    store.expire(now + KEPT_TURN_TTL);
    assert_eq!(store.len(), 0);
    let lost = store.forgotten("resp_1").unwrap().unwrap();
    assert_eq!(
        lost.calls,
        [("call_0".to_owned(), false), ("srv_0".to_owned(), true)]
    );
    assert!(store.forgotten("resp_3").is_none() && !store.is_idle());
}

#[test]
fn a_burst_from_one_client_makes_room_with_its_own_turns() {
    let mut store = KeptTurns::default();
    let now = Instant::now();
    store
        .keep(turn(&["mine", "resp_mine"], "hi"), owner(1), now)
        .unwrap();
    for n in 0..MAX_KEPT_TURNS + 4 {
        let id = format!("burst_{n}");
        store.keep(turn(&[&id], "hi"), owner(2), now).unwrap();
    }
    assert_eq!(store.len(), MAX_KEPT_TURNS);
    assert!(
        store.find("resp_mine").is_some(),
        "the other app's turn stays"
    );
    assert!(store.find("burst_0").is_none() && store.forgotten("burst_4").is_some());
    assert!(store.find("burst_5").is_some());
}

#[test]
fn one_conversation_on_fresh_connections_makes_room_with_its_own_turns() {
    let mut store = KeptTurns::default();
    let now = Instant::now();
    store.keep(turn(&["other"], "hi"), owner(1), now).unwrap();
    store.keep(turn(&["first"], "go"), owner(2), now).unwrap();
    let conversation = store.find("first").unwrap().conversation;
    for n in 0..MAX_KEPT_TURNS {
        let id = format!("step_{n}");
        let owner = Owner {
            client: client(1000 + n as u16),
            conversation: Some(conversation),
        };
        store.keep(turn(&[&id], "go"), owner, now).unwrap();
    }
    assert!(
        store.find("other").is_some(),
        "another conversation's turn stays"
    );
    assert!(store.find("first").is_none());
}

#[test]
fn when_every_holder_has_one_turn_the_least_recently_used_goes() {
    let mut store = KeptTurns::default();
    let now = Instant::now();
    for n in 0..MAX_KEPT_TURNS {
        let id = format!("t{n}");
        store
            .keep(turn(&[&id], "hi"), owner(n as u16), now)
            .unwrap();
    }
    let first = store.find("t0").unwrap();
    store.used(&[first.slot], now);
    store.keep(turn(&["new"], "hi"), owner(9999), now).unwrap();
    assert!(store.find("t0").is_some() && store.find("t1").is_none());
}

#[test]
fn when_bytes_run_out_the_holder_of_the_most_bytes_makes_room() {
    let mut store = KeptTurns::default();
    let now = Instant::now();
    let big = |name: &str, mib: usize| turn(&[name, "x".repeat(mib << 20).as_str()], "hi");
    store.keep(turn(&["small"], "hi"), owner(1), now).unwrap();
    for n in 0..3 {
        store
            .keep(big(&format!("big{n}"), 10), owner(2), now)
            .unwrap();
    }
    store.keep(big("other", 5), owner(3), now).unwrap();
    assert!(store.bytes() <= MAX_KEPT_BYTES);
    assert!(
        store.find("small").is_some(),
        "the oldest, but its holder has the least"
    );
    assert!(store.find("big0").is_none() && store.find("big1").is_some());
    assert!(store.find("other").is_some());
}
