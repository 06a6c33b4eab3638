//! Anthropic Messages provider for noetic.
