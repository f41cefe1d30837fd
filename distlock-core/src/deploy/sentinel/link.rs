//! The command connection of a Sentinel deployment (`MasterLink`): the master, found on first
//! use and again after every switch.

use std::sync::{Arc, RwLock};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Pipeline, ProtocolVersion, RedisFuture, RedisResult, Value};
use tokio::sync::Mutex;

use crate::background::Background;
use crate::deploy::sentinel::sentinels::Sentinels;
use crate::sync;

/// The command connection of a Sentinel deployment: the master, found on first use and again
/// after the sentinels announce a new one; replaced (by `connection`) once it fails or finds
/// itself on a replica.
#[derive(Clone)]
pub(crate) struct MasterLink(Arc<LinkInner>);

struct LinkInner {
    sentinels: Arc<Sentinels>,
    /// The master connection and the switch count when it was found.
    current: RwLock<Option<(u64, MultiplexedConnection)>>,
    /// One search at a time.
    finding: Mutex<()>,
    background: Background,
}

impl MasterLink {
    /// A link that finds the master on first use.
    pub(crate) fn lazy(sentinels: Arc<Sentinels>, background: Background) -> MasterLink {
        MasterLink(Arc::new(LinkInner {
            sentinels,
            current: RwLock::new(None),
            finding: Mutex::new(()),
            background,
        }))
    }

    /// The link, connected to the master (and the sentinels watched for switches).
    pub(crate) async fn connected(self) -> RedisResult<MasterLink> {
        self.conn().await?;
        let sentinels = self.0.sentinels.clone();
        self.0
            .background
            .enter(async move {
                sentinels.watch();
                sentinels.refresh_healthy().await;
            })
            .await;
        Ok(self)
    }

    /// The master connection: the one found since the last switch, or one found now
    /// (concurrent callers wait for the same search). It is made on the client's runtime: its
    /// driver must outlive any caller's runtime.
    async fn conn(&self) -> RedisResult<MultiplexedConnection> {
        let inner = &self.0;
        let fresh = || {
            let switches = inner.sentinels.switches();
            match &*sync::read(&inner.current) {
                Some((seen, conn)) if *seen == switches => Ok(conn.clone()),
                _ => Err(switches),
            }
        };
        if let Ok(conn) = fresh() {
            return Ok(conn);
        }
        let _finding = inner.finding.lock().await;
        let switches = match fresh() {
            Ok(conn) => return Ok(conn),
            Err(switches) => switches,
        };
        let find = inner.sentinels.connect_master(ProtocolVersion::RESP2, None);
        let conn = inner.background.enter(find).await?;
        *sync::write(&inner.current) = Some((switches, conn.clone()));
        Ok(conn)
    }
}

impl ConnectionLike for MasterLink {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut conn = self.conn().await?;
            conn.req_packed_command(cmd).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut conn = self.conn().await?;
            conn.req_packed_commands(cmd, offset, count).await
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}
