//! A minimal RESP2 client over a blocking socket: commands, pipelines and a subscriber, with
//! replies kept exactly as the server sent them (an error's full text, integers apart from
//! strings), which is what a comparison needs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A reply as it came.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Resp {
    Nil,
    Int(i64),
    Bulk(String),
    Simple(String),
    Array(Vec<Resp>),
    Error(String),
}

/// One connection.
pub(crate) struct Conn {
    out: TcpStream,
    input: BufReader<TcpStream>,
}

impl Conn {
    pub(crate) fn connect(port: u16) -> Conn {
        let out = TcpStream::connect(("127.0.0.1", port)).expect("connect to redis-server");
        out.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("read timeout");
        out.set_nodelay(true).expect("nodelay");
        let input = BufReader::new(out.try_clone().expect("clone the socket"));
        Conn { out, input }
    }

    fn encode(buf: &mut Vec<u8>, args: &[String]) {
        buf.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            buf.extend_from_slice(a.as_bytes());
            buf.extend_from_slice(b"\r\n");
        }
    }

    /// Sends commands without reading.
    pub(crate) fn send(&mut self, cmds: &[Vec<String>]) {
        let mut buf = Vec::new();
        for c in cmds {
            Self::encode(&mut buf, c);
        }
        self.out.write_all(&buf).expect("write to redis-server");
    }

    /// One command and its reply.
    pub(crate) fn call(&mut self, args: &[&str]) -> Resp {
        self.send(&[args.iter().map(|s| s.to_string()).collect()]);
        self.read()
    }

    /// Several commands in one round trip, their replies in order.
    pub(crate) fn pipeline(&mut self, cmds: &[Vec<String>]) -> Vec<Resp> {
        self.send(cmds);
        cmds.iter().map(|_| self.read()).collect()
    }

    fn line(&mut self) -> String {
        let mut s = String::new();
        self.input
            .read_line(&mut s)
            .expect("read a reply line from redis-server");
        assert!(
            s.ends_with("\r\n"),
            "redis-server closed the connection: {s:?}"
        );
        s.truncate(s.len() - 2);
        s
    }

    /// The next reply.
    pub(crate) fn read(&mut self) -> Resp {
        let line = self.line();
        let (kind, rest) = line.split_at(1);
        match kind {
            "+" => Resp::Simple(rest.to_owned()),
            "-" => Resp::Error(rest.to_owned()),
            ":" => Resp::Int(rest.parse().expect("an integer reply")),
            "$" => {
                let n: i64 = rest.parse().expect("a bulk length");
                if n < 0 {
                    return Resp::Nil;
                }
                let mut buf = vec![0; n as usize + 2];
                self.input.read_exact(&mut buf).expect("read a bulk string");
                buf.truncate(n as usize);
                Resp::Bulk(String::from_utf8(buf).expect("utf-8 bulk"))
            }
            "*" => {
                let n: i64 = rest.parse().expect("an array length");
                if n < 0 {
                    return Resp::Nil;
                }
                Resp::Array((0..n).map(|_| self.read()).collect())
            }
            other => panic!("unexpected RESP type {other:?} in {line:?}"),
        }
    }
}
