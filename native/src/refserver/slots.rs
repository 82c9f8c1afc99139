//! The service slots: N of them, taken first come, first served (tokio's `Semaphore` is fair:
//! permits go out in the order they were asked for). With fixed service S and N slots the
//! capacity is exactly N/S requests a second. Unlimited: no queue at all.
//!
//! The gauge counts the requests in service (slot taken, hold not over) and the most seen at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub struct Slots {
    semaphore: Option<Arc<Semaphore>>,
    in_service: AtomicU64,
    most_in_service: AtomicU64,
}

/// A slot held: freed when dropped.
pub struct Slot<'a> {
    slots: &'a Slots,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.slots.in_service.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Slots {
    /// `None`: unlimited.
    pub fn new(count: Option<u32>) -> Slots {
        Slots {
            semaphore: count.map(|n| Arc::new(Semaphore::new(n as usize))),
            in_service: AtomicU64::new(0),
            most_in_service: AtomicU64::new(0),
        }
    }

    /// Wait for a slot (FIFO).
    pub async fn take(&self) -> Slot<'_> {
        let permit = match &self.semaphore {
            // the semaphore is never closed
            Some(semaphore) => Some(
                Arc::clone(semaphore)
                    .acquire_owned()
                    .await
                    .expect("slots are never closed"),
            ),
            None => None,
        };
        let now = self.in_service.fetch_add(1, Ordering::AcqRel) + 1;
        self.most_in_service.fetch_max(now, Ordering::AcqRel);
        Slot {
            slots: self,
            _permit: permit,
        }
    }

    pub fn in_service(&self) -> u64 {
        self.in_service.load(Ordering::Acquire)
    }

    pub fn most_in_service(&self) -> u64 {
        self.most_in_service.load(Ordering::Acquire)
    }

    /// Start counting the most in service afresh (at a reset).
    pub fn reset_most(&self) {
        self.most_in_service
            .store(self.in_service(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

    #[test]
    fn n_slots_serve_at_most_n_at_once_in_arrival_order() {
        // one thread: each task is polled (and queued for its slot) before the next is made
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let slots = Arc::new(Slots::new(Some(3)));
        let order = Arc::new(Mutex::new(Vec::new()));
        runtime.block_on(async {
            let mut tasks = Vec::new();
            for index in 0..20u32 {
                let slots = Arc::clone(&slots);
                let order = Arc::clone(&order);
                tasks.push(tokio::spawn(async move {
                    let _slot = slots.take().await;
                    order.lock().unwrap().push(index);
                    assert!(slots.in_service() <= 3);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }));
                // let it ask for its slot before the next one arrives
                tokio::task::yield_now().await;
            }
            for task in tasks {
                task.await.unwrap();
            }
        });
        assert_eq!(slots.most_in_service(), 3);
        assert_eq!(slots.in_service(), 0);
        assert_eq!(*order.lock().unwrap(), (0..20).collect::<Vec<_>>());
    }

    #[test]
    fn unlimited_slots_never_queue() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let slots = Slots::new(None);
        runtime.block_on(async {
            let held: Vec<_> = futures_of(&slots, 100).await;
            assert_eq!(slots.in_service(), 100);
            drop(held);
        });
        assert_eq!(slots.most_in_service(), 100);
        assert_eq!(slots.in_service(), 0);
    }

    async fn futures_of(slots: &Slots, n: usize) -> Vec<Slot<'_>> {
        let mut held = Vec::new();
        for _ in 0..n {
            held.push(slots.take().await);
        }
        held
    }
}
