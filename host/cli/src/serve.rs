//! `flowbox serve`: the web view of the journal's threads (`flowbox_web`), on loopback unless
//! told otherwise, until interrupted.

use std::net::SocketAddr;

use clap::Args;

use crate::Failure;
use crate::options::JournalOptions;

/// Arguments of `flowbox serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Where to listen. Loopback by default: give an address of another interface only on a
    /// network you trust (the view shows every script, prompt and reply).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    #[command(flatten)]
    journal: JournalOptions,
}

pub(crate) async fn serve(args: ServeArgs) -> Result<u8, Failure> {
    let path = args.journal.path().map_err(Failure::input)?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| Failure::input(anyhow::anyhow!("cannot listen on {}: {e}", args.listen)))?;
    let address = listener
        .local_addr()
        .map_err(|e| Failure::input(anyhow::anyhow!("{e}")))?;
    let scope = if address.ip().is_loopback() {
        "loopback only"
    } else {
        "reachable from the network"
    };
    err!(
        "flowbox serve: http://{address}/ ({scope}), reading {}",
        path.display()
    );
    let interrupted = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    flowbox_web::serve(listener, path, interrupted)
        .await
        .map_err(|e| Failure::input(anyhow::anyhow!("the server stopped: {e}")))?;
    Ok(0)
}
