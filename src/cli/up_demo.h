// The serving half of `aicloud up --demo`: the platform's headline on one machine, through the
// same API and front door a user calls.
//
//   1. a random-weight Llama-family model is written under the data directory (GPT-2 vocabulary);
//   2. Deployment demo/chat is applied with replicas {min: 0, max: 2} and a 10 s scale-to-zero;
//   3. API keys are made for tenant demo and for tenant other;
//   4. a streaming chat request with demo's key is held while a replica starts, and its tokens
//      print as they arrive;
//   5. the same request with other's key is refused with 403;
//   6. after 10 s without requests the deployment scales back to zero.
//
// Each step prints what it did and how long it took; the demo stops at the first step that
// fails, with the reason.
#pragma once

#include <string>

#include "core/status.h"

namespace aicloud::cli {

struct ServingDemoOptions {
  std::string server_url;   // the server's API and OpenAI front door
  std::string admin_token;  // a cluster admin's key
  std::string data_dir;     // the model goes to DATA_DIR/models/demo-chat
  std::string tokenizer;    // tokenizer.json the model's vocabulary comes from
  std::string ca_file;      // an https server_url's CA ("" = the system's)
};

// Returns tenant demo's API key (for the commands printed after the demo).
StatusOr<std::string> RunServingDemo(const ServingDemoOptions& o);

}  // namespace aicloud::cli
