//! A child process's stdout read line by line while it runs, for tests that watch
//! what several client processes say (assignments, records) and act on it.

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

/// The lines a child has written to its (piped) stdout so far, collected by a thread
/// of their own so that the child never blocks on a full pipe.
#[derive(Debug)]
pub struct ChildLines {
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

impl ChildLines {
    /// Starts reading `child`'s stdout (which must be `Stdio::piped()`; without it
    /// there are never any lines).
    pub fn read(child: &mut Child) -> ChildLines {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let reader = child.stdout.take().map(|stdout| {
            let lines = Arc::clone(&lines);
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    lines
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(line);
                }
            })
        });
        ChildLines { lines, reader }
    }

    /// A copy of the lines read so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every line, once the child has exited (its stdout closed): waits for the
    /// reading thread to reach the end.
    pub fn finish(mut self) -> Vec<String> {
        if let Some(reader) = self.reader.take() {
            // The thread only reads and pushes: a panic there is a poisoned lock,
            // which `lines` tolerates.
            let _ = reader.join();
        }
        self.lines()
    }
}
