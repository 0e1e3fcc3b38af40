// slm/ensemble/member.hpp - one ensemble member: any supported checkpoint behind one type.
//
// An ensemble mixes model families (a NAM56R specialist, a config-driven decoder such as a
// Llama/Qwen generalist, a nanochat-lineage model), so a member is an slm::any_model
// (models/any_model.hpp): whichever family its config.json names, and its sessions the
// matching session. member_model and member_session are the ensemble's names for them.
//
//   auto m = slm::ensemble::member_model::load("models/nam56r-cpp-14m");   // result<>
//   auto s = m->new_session();                                             // member_session
//   s.forward(ids, 1, logits.data(), cx);                                  // [1, vocab()]
//
// A loaded member_model is immutable and may be shared by threads; a session belongs to
// one thread.
#pragma once
#include "slm/core/build_mode.hpp"

#include <string_view>

#include "slm/models/any_model.hpp"
#include "slm/text/tokenizer.hpp"

namespace slm::ensemble {

using member_model = any_model;
using member_session = any_session;

// What strategies and routers see of a member: the model, its tokenizer (members that share
// one tokenizer point at the same object), its name and the temperature fitted for it
// (calibration: logits are divided by it before softmax when distributions are mixed).
// Non-owning: the registry (registry.hpp) or the host keeps the pointees alive.
struct member_ref {
  const member_model* model = nullptr;
  const tokenizer* tok = nullptr;
  std::string_view name;
  float temperature = 1.0f;
};

}  // namespace slm::ensemble
