//! Scale to zero: when each workflow last had an event (`faas:activity`), and which
//! workflows have events held waiting for a worker (`faas:demand`). Gateways write
//! both; whoever scales the workers (the Kubernetes operator) reads them, and clears a
//! demand once it has acted on it.
//!
//! Both are written only for workflows deployed at that moment, in the same script
//! that checks it: a gateway flushes a second's events, or signals a held event's
//! demand, after the workflow may have been removed (which removes its fields), and a
//! tenant deploying and removing new names in a loop would otherwise leave a field
//! behind for each.

use crate::state::{DEPLOYMENTS, SharedState, SharedStateError, unix_millis};
use redis::AsyncCommands;
use std::collections::BTreeMap;

/// Workflow name -> when it last had an event (milliseconds since the Unix epoch).
pub(crate) const ACTIVITY: &str = "faas:activity";
/// Workflow name -> when an event held for want of a ready replica last asked for a
/// worker (milliseconds since the Unix epoch).
pub(crate) const DEMAND: &str = "faas:demand";

/// Sets each field ARGV[2i-1] of hash KEYS[1] to ARGV[2i] unless it already holds a
/// later time (gateways flush at different moments, and an older stamp must not
/// replace a newer one written by another gateway) or names no workflow of the
/// deployments KEYS[2].
const RAISE: &str = "for i = 1, #ARGV, 2 do \
     if redis.call('hexists', KEYS[2], ARGV[i]) == 1 then \
     local current = tonumber(redis.call('hget', KEYS[1], ARGV[i])) \
     if current == nil or current < tonumber(ARGV[i + 1]) then \
     redis.call('hset', KEYS[1], ARGV[i], ARGV[i + 1]) end end end return 1";

/// Sets field ARGV[1] of hash KEYS[1] to ARGV[2] if it names a workflow of the
/// deployments KEYS[2]; returns whether it did.
const SET_IF_DEPLOYED: &str = "if redis.call('hexists', KEYS[2], ARGV[1]) == 1 then \
     redis.call('hset', KEYS[1], ARGV[1], ARGV[2]) return 1 end return 0";

/// Removes field ARGV[1] of hash KEYS[1] only if it holds a time no later than
/// ARGV[2]: a demand signalled after the reader acted on it stays.
const CLEAR_UP_TO: &str = "local current = tonumber(redis.call('hget', KEYS[1], ARGV[1])) \
     if current ~= nil and current <= tonumber(ARGV[2]) then \
     return redis.call('hdel', KEYS[1], ARGV[1]) end return 0";

impl SharedState {
    /// Records when each workflow of `last_event` (name -> unix milliseconds) last had
    /// an event, in one round trip; a stamp older than the one stored is ignored, and
    /// so is a workflow not deployed (any more).
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn record_activity(
        &self,
        last_event: &BTreeMap<String, u64>,
    ) -> Result<(), SharedStateError> {
        if last_event.is_empty() {
            return Ok(());
        }
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(RAISE).arg(2).arg(ACTIVITY).arg(DEPLOYMENTS);
        for (name, at) in last_event {
            cmd.arg(name).arg(*at);
        }
        let _: i64 = cmd.query_async(&mut self.conn()).await?;
        Ok(())
    }

    /// When each workflow last had an event (name -> unix milliseconds), as the
    /// gateways recorded it.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`], also when a stamp is not a number.
    pub async fn activity(&self) -> Result<BTreeMap<String, u64>, SharedStateError> {
        Ok(self.conn().hgetall(ACTIVITY).await?)
    }

    /// Says that an event for workflow `name` is held waiting for a worker to load it;
    /// returns the stamp written (unix milliseconds), or `None` if `name` is not
    /// deployed (any more), which writes nothing.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn signal_demand(&self, name: &str) -> Result<Option<u64>, SharedStateError> {
        let at = unix_millis();
        let written: i64 = redis::cmd("EVAL")
            .arg(SET_IF_DEPLOYED)
            .arg(2)
            .arg(DEMAND)
            .arg(DEPLOYMENTS)
            .arg(name)
            .arg(at)
            .query_async(&mut self.conn())
            .await?;
        Ok((written == 1).then_some(at))
    }

    /// The workflows with events waiting for a worker, with when that was last
    /// signalled (name -> unix milliseconds).
    ///
    /// # Errors
    /// [`SharedStateError::Redis`], also when a stamp is not a number.
    pub async fn demand(&self) -> Result<BTreeMap<String, u64>, SharedStateError> {
        Ok(self.conn().hgetall(DEMAND).await?)
    }

    /// Clears workflow `name`'s demand once it is satisfied, unless it was signalled
    /// again after `up_to_ms` (the stamp the caller read and acted on); returns
    /// whether it was removed.
    ///
    /// # Errors
    /// [`SharedStateError::Redis`].
    pub async fn clear_demand(&self, name: &str, up_to_ms: u64) -> Result<bool, SharedStateError> {
        let removed: i64 = redis::cmd("EVAL")
            .arg(CLEAR_UP_TO)
            .arg(1)
            .arg(DEMAND)
            .arg(name)
            .arg(up_to_ms)
            .query_async(&mut self.conn())
            .await?;
        Ok(removed == 1)
    }
}
