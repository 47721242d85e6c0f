//! Each UTC day's spend across runs, counted in `spend_day` ([`SpendLedger`]).

use async_trait::async_trait;
use nrllm_core::clock::now_ms;
use nrllm_core::run_store::StoreError;
use nrllm_core::spend::{CapScope, DaySpend, SpendKey, SpendLedger};
use sqlx::Row as _;

use crate::error::backend;

use super::*;

fn micros(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

fn stored(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn count_from_row(row: &sqlx::any::AnyRow) -> Result<DaySpend, StoreError> {
    Ok(DaySpend {
        spent_micros: micros(row.try_get("spent_micros").map_err(backend)?),
        raised_micros: micros(row.try_get("raised_micros").map_err(backend)?),
    })
}

#[async_trait]
impl SpendLedger for SqlRunStore {
    async fn add_spend(&self, day: i64, keys: &[SpendKey], micros: u64) -> Result<(), StoreError> {
        let mut tx = self.db.begin_write().await.map_err(backend)?;
        // In the keys' order (the configuration's, then the user's): two transactions that add
        // to the same rows lock them in the same order.
        let mut keys = keys.to_vec();
        keys.sort();
        for key in &keys {
            sqlx::query(
                "INSERT INTO spend_day (scope, name, day, spent_micros, updated_at_ms) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (scope, name, day) DO UPDATE SET \
                 spent_micros = spend_day.spent_micros + excluded.spent_micros, \
                 updated_at_ms = excluded.updated_at_ms",
            )
            .bind(key.scope.as_str())
            .bind(key.name.as_str())
            .bind(day)
            .bind(stored(micros))
            .bind(now_ms())
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        }
        tx.commit().await.map_err(backend)?;
        self.committed();
        Ok(())
    }

    async fn day_spend(&self, day: i64, keys: &[SpendKey]) -> Result<Vec<DaySpend>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        // One read for all the keys (two, before each model request under a cap).
        let names: Vec<String> = (0..keys.len()).map(|i| format!("${}", i + 2)).collect();
        let sql = format!(
            "SELECT scope, name, spent_micros, raised_micros FROM spend_day \
             WHERE day = $1 AND name IN ({})",
            names.join(", ")
        );
        let mut query = sqlx::query(&sql).bind(day);
        for key in keys {
            query = query.bind(key.name.as_str());
        }
        let rows = query.fetch_all(self.db.pool()).await.map_err(backend)?;
        let mut counts = vec![DaySpend::default(); keys.len()];
        for row in &rows {
            let scope: String = row.try_get("scope").map_err(backend)?;
            let name: String = row.try_get("name").map_err(backend)?;
            let at = keys
                .iter()
                .position(|key| key.scope.as_str() == scope && key.name == name);
            if let Some(at) = at {
                counts[at] = count_from_row(row)?;
            }
        }
        Ok(counts)
    }

    async fn raise_cap(
        &self,
        day: i64,
        key: &SpendKey,
        micros: u64,
        by: &str,
    ) -> Result<DaySpend, StoreError> {
        let mut tx = self.db.begin_write().await.map_err(backend)?;
        let row = sqlx::query(
            "INSERT INTO spend_day (scope, name, day, raised_micros, raised_by, updated_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (scope, name, day) DO UPDATE SET \
             raised_micros = spend_day.raised_micros + excluded.raised_micros, \
             raised_by = excluded.raised_by, updated_at_ms = excluded.updated_at_ms \
             RETURNING spent_micros, raised_micros",
        )
        .bind(key.scope.as_str())
        .bind(key.name.as_str())
        .bind(day)
        .bind(stored(micros))
        .bind(by)
        .bind(now_ms())
        .fetch_one(&mut *tx)
        .await
        .map_err(backend)?;
        let count = count_from_row(&row)?;
        tx.commit().await.map_err(backend)?;
        self.committed();
        Ok(count)
    }

    async fn spend_of_day(
        &self,
        day: i64,
        limit: u32,
    ) -> Result<Vec<(SpendKey, DaySpend)>, StoreError> {
        let rows = sqlx::query(
            "SELECT scope, name, spent_micros, raised_micros FROM spend_day WHERE day = $1 \
             ORDER BY scope, spent_micros DESC, name LIMIT $2",
        )
        .bind(day)
        .bind(i64::from(limit))
        .fetch_all(self.db.pool())
        .await
        .map_err(backend)?;
        rows.iter()
            .map(|row| {
                let scope: String = row.try_get("scope").map_err(backend)?;
                let key = SpendKey {
                    scope: CapScope::parse(&scope)
                        .ok_or_else(|| StoreError::Corrupt(format!("spend scope `{scope}`")))?,
                    name: row.try_get("name").map_err(backend)?,
                };
                Ok((key, count_from_row(row)?))
            })
            .collect()
    }
}
