//! A bounded queue whose one consumer is a task started after the queue is made: the live
//! events' publisher and the waiting lists' writer. Producers never wait: a full queue hands
//! the item back, and each producer decides what that costs.

use std::sync::Mutex;

use tokio::sync::mpsc;

pub(in crate::locks) struct Queue<T> {
    tx: mpsc::Sender<T>,
    /// Until the consumer takes it.
    rx: Mutex<Option<mpsc::Receiver<T>>>,
}

impl<T> Queue<T> {
    pub fn new(capacity: usize) -> Self {
        let (tx, rx) = mpsc::channel(capacity);
        Self {
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }

    /// Queues `item`, or hands it back when the queue is full (or its consumer stopped).
    pub fn try_send(&self, item: T) -> Result<(), T> {
        self.tx.try_send(item).map_err(|e| match e {
            mpsc::error::TrySendError::Full(item) | mpsc::error::TrySendError::Closed(item) => item,
        })
    }

    /// The receiving end, for the consumer: only the first call gets it.
    pub fn take_receiver(&self) -> Option<mpsc::Receiver<T>> {
        self.rx.lock().ok().and_then(|mut rx| rx.take())
    }
}
