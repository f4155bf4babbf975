// CURVE keys: ZeroMQ's authenticated encryption for a run's sockets. One cluster key pair, kept in a
// key file that every process of the run reads; a socket proves it holds the pair during the
// handshake (deploy/zmq_node.cc admits only that key). Key files are written owner-readable only.
#pragma once

#include <string>

#include "core/status.h"

namespace narrows::deploy {

// A CURVE key pair in Z85 text (40 characters each).
struct CurveKeys {
  std::string public_key, secret_key;
};
// A fresh key pair.
core::Result<CurveKeys> GenerateCurveKeys();
// Key files: two lines, `public-key = "..."` and `secret-key = "..."` (ZeroMQ's certificate format).
core::Result<CurveKeys> ReadKeyFile(const std::string& path);
// Writes a fresh key pair to `path`, readable by its owner only; fails if `path` exists.
core::Status WriteNewKeyFile(const std::string& path);

}  // namespace narrows::deploy
