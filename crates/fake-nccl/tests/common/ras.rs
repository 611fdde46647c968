//! A RAS client for the tests: NCCL's protocol spoken line by line; two ranks to ask about.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

pub struct RasClient {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

impl RasClient {
    pub fn connect(address: &str) -> RasClient {
        let stream = TcpStream::connect(address).expect("the RAS service listens");
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        RasClient {
            writer: stream.try_clone().unwrap(),
            reader: BufReader::new(stream),
        }
    }

    /// Sends a command and reads its one-line answer.
    pub fn ask(&mut self, command: &str) -> String {
        self.writer
            .write_all(format!("{command}\n").as_bytes())
            .unwrap();
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        line
    }

    /// Sends STATUS and reads the answer until the service closes the connection.
    pub fn status(mut self) -> String {
        self.writer.write_all(b"STATUS\n").unwrap();
        let mut answer = String::new();
        self.reader.read_to_string(&mut answer).unwrap();
        answer
    }
}

/// A port nothing listens on yet, as `127.0.0.1:port`, set as the process's NCCL_RAS_ADDR
/// before its first communicator starts the RAS thread.
pub fn listen_on_a_free_port() -> String {
    static ADDRESS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ADDRESS
        .get_or_init(|| {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let address = listener.local_addr().unwrap().to_string();
            std::env::set_var("NCCL_RAS_ADDR", &address);
            address
        })
        .clone()
}

/// Ranks 0 and 1 of a communicator on `devices`, joined from two threads (each blocks until
/// the other joins): their communicators.
pub fn join_two(id: fake_nccl::UniqueId, devices: [std::ffi::c_int; 2]) -> Vec<usize> {
    std::thread::scope(|scope| {
        let ranks: Vec<_> = (0..2)
            .map(|rank| scope.spawn(move || super::join(id, rank, devices[rank as usize])))
            .collect();
        ranks.into_iter().map(|r| r.join().unwrap()).collect()
    })
}
