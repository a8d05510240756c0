//! brook's shared test helpers, used by the workspace's tests only (not published).
//! One copy of each helper: tests import them from here instead of pasting their own.

pub mod operator;
