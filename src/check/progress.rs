//! Step lines on stderr while checks run, and the outcome words the report
//! shares with them. Apart from the report's rendering ([`super::render`])
//! so that the steps that print progress (the peer check among them) and
//! the report that renders their results do not import each other.

use super::CheckOutcome;
use std::io::Write;

/// Step lines on stderr while checks run: rewritten in place on a terminal,
/// one plain line per finished step otherwise.
pub struct StepLines {
    out: Box<dyn Write + Send>,
    tty: bool,
    step: String,
}

impl StepLines {
    pub fn new(out: Box<dyn Write + Send>, tty: bool) -> StepLines {
        StepLines {
            out,
            tty,
            step: String::new(),
        }
    }

    pub fn start(&mut self, step: &str) {
        self.step = step.to_string();
        if self.tty {
            let _ = write!(self.out, "\r\x1b[2K  … {step}");
            let _ = self.out.flush();
        }
    }

    /// A line about the running step (e.g. what it waits for).
    pub fn note(&mut self, text: &str) {
        if self.tty {
            let _ = write!(self.out, "\r\x1b[2K  … {}: {text}", self.step);
        } else {
            let _ = writeln!(self.out, "[..] {}: {text}", self.step);
        }
        let _ = self.out.flush();
    }

    pub fn done(&mut self, outcome: CheckOutcome, summary: &str) {
        let mark = word(outcome, self.tty);
        if self.tty {
            let _ = writeln!(self.out, "\r\x1b[2K{mark} {}: {summary}", self.step);
        } else {
            let _ = writeln!(self.out, "[{}] {}: {summary}", plain(outcome), self.step);
        }
        let _ = self.out.flush();
    }
}

pub(super) fn plain(o: CheckOutcome) -> &'static str {
    match o {
        CheckOutcome::Ok => "ok",
        CheckOutcome::Fail => "FAIL",
        CheckOutcome::Warn => "warn",
        CheckOutcome::Skip => "skip",
    }
}

pub(super) fn word(o: CheckOutcome, color: bool) -> String {
    let w = format!("{:<4}", plain(o));
    if !color {
        return w;
    }
    let code = match o {
        CheckOutcome::Ok => 32,
        CheckOutcome::Fail => 31,
        CheckOutcome::Warn => 33,
        CheckOutcome::Skip => 2,
    };
    format!("\x1b[{code}m{w}\x1b[0m")
}
