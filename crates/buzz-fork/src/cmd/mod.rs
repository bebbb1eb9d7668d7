//! One module per subcommand. [`dispatch`] is the single table mapping the
//! command line to them. Every command first loads its inputs and checks its
//! preconditions, then acts.

use crate::cli::{Cli, Command};
use crate::context::{Context, Outcome};
use crate::error::Result;

pub mod apply;
pub mod check;
pub mod ci;
pub mod refresh;
pub mod render;
pub mod retire;
pub mod status;
pub mod sync;
pub mod verify;

/// Runs the command named on the command line.
///
/// # Errors
/// Whatever the command reports.
pub fn dispatch(cli: &Cli) -> Result<Outcome> {
    let ctx = Context::new(cli.root.as_deref())?;
    // Commands that use the work repo hold the work-area lock throughout;
    // `status` and `render` work in process and never wait.
    let _lock = match &cli.command {
        Command::Status | Command::Render => None,
        other => Some(crate::workarea::lock_work_area(&ctx.layout, other.name())?),
    };
    match &cli.command {
        Command::Apply(args) => apply::run(&ctx, args),
        Command::Check => check::run(&ctx),
        Command::Verify(args) => verify::run(&ctx, args),
        Command::Refresh(args) => refresh::run(&ctx, args),
        Command::Sync(args) => sync::run(&ctx, args),
        Command::Retire(args) => retire::run(&ctx, args),
        Command::Status => status::run(&ctx),
        Command::Render => render::run(&ctx),
        Command::Ci(args) => ci::run(&ctx, args),
    }
}
