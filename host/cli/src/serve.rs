//! `flowbox serve`: the web view of the journal's threads (`flowbox_web`), on loopback unless
//! told otherwise, behind the door the flags describe, until interrupted.

use std::net::SocketAddr;

use clap::Args;

use crate::Failure;
use crate::options::{DoorOptions, JournalOptions, door_failure};

/// Arguments of `flowbox serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Where to listen. Loopback by default; another address needs a token (--token-file) or
    /// --insecure, since the view shows every script, prompt and reply.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    #[command(flatten)]
    door: DoorOptions,
    #[command(flatten)]
    journal: JournalOptions,
}

pub(crate) async fn serve(args: ServeArgs) -> Result<u8, Failure> {
    let path = args.journal.path().map_err(Failure::input)?;
    let door = args.door.door()?;
    door.admits(args.listen).map_err(door_failure)?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| Failure::input(anyhow::anyhow!("cannot listen on {}: {e}", args.listen)))?;
    let address = listener
        .local_addr()
        .map_err(|e| Failure::input(anyhow::anyhow!("{e}")))?;
    let scope = door.scope(address);
    err!(
        "flowbox serve: http://{address}/ ({scope}), reading {}",
        path.display()
    );
    let view = flowbox_web::WebView::new(path)
        .door(door)
        .on_login_code(move |code| {
            err!("flowbox serve: log a browser in with http://{address}/login?code={code}");
        });
    view.serve(listener, flowbox_door::interrupted())
        .await
        .map_err(|e| Failure::output(anyhow::anyhow!("the server stopped: {e}")))?;
    Ok(0)
}
