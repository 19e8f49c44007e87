//! Turns SIGINT/SIGTERM into the cancellation every task of the service watches.

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Cancels `token` on the first SIGINT or SIGTERM.
pub fn cancel_on_signals(token: CancellationToken) -> std::io::Result<()> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = interrupt.recv() => tracing::info!("SIGINT: shutting down"),
            _ = terminate.recv() => tracing::info!("SIGTERM: shutting down"),
            () = token.cancelled() => return,
        }
        token.cancel();
    });
    Ok(())
}
