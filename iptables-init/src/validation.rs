//! See lib.rs for the pipeline.
