// The property names that the data path reads and writes on every call, made once per Node
// environment. napi_get_named_property and napi_set_named_property take a C string, which V8
// measures, decodes and looks up in its string table on every call: profiled in the Soft-RoCE
// guest, that was a tenth of a ping-pong's CPU (docs/benchmarks-notebook.md, issue 20: "Profiled
// in the guest"). N-API 8 cannot reference a string, so the names live in an array the module
// keeps.
#pragma once

#include <napi.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace rdma {

enum class Key : uint32_t {
  Op, Id, Segments, Imm, Inline, Completion, RemoteAddress, Rkey,  // a work request
  Mr, Offset, Length,                                              // a segment
  Status, ByteLength, Opcode, Flags, QpNum,                        // a completion (with Id, Imm)
  Count
};

inline const char* KeyName(Key key) {
  static const char* const names[] = {"op",     "id",     "segments", "imm",        "inline", "completion", "remoteAddress",
                                      "rkey",   "mr",     "offset",   "length",     "status", "byteLength", "opcode",
                                      "flags",  "qpNum"};
  static_assert(sizeof names / sizeof names[0] == static_cast<uint32_t>(Key::Count), "a name for every key");
  return names[static_cast<uint32_t>(key)];
}

// The module's array of every key, in Key's order (kept by Module).
inline Napi::Reference<Napi::Array> MakeKeys(Napi::Env env) {
  Napi::Array keys = Napi::Array::New(env, static_cast<size_t>(Key::Count));
  for (uint32_t i = 0; i < static_cast<uint32_t>(Key::Count); i++) keys.Set(i, Napi::String::New(env, KeyName(static_cast<Key>(i))));
  return Napi::Persistent(keys);
}

// One call's keys: the module's array read once, each name on its first use. `keys` is null when
// the module is gone (an environment torn down): the names are then made as they are asked for.
class Keys {
 public:
  Keys(Napi::Env env, const Napi::Reference<Napi::Array>* keys)
      : env_(env), array_(keys != nullptr && !keys->IsEmpty() ? keys->Value() : Napi::Array()) {}

  Napi::Value operator[](Key key) {
    napi_value& slot = cache_[static_cast<uint32_t>(key)];
    if (slot == nullptr) {
      Napi::Value name = array_.IsEmpty() ? Napi::Value() : array_.Get(static_cast<uint32_t>(key));
      if (name.IsEmpty() || !name.IsString()) name = Napi::String::New(env_, KeyName(key));
      slot = name;
    }
    return Napi::Value(env_, slot);
  }

 private:
  Napi::Env env_;
  Napi::Array array_;
  napi_value cache_[static_cast<uint32_t>(Key::Count)] = {};
};

// A completion as an object whose properties are defined, not assigned: an assignment would run a
// setter on Object.prototype (JavaScript, which could delete the queue being drained). `imm` and
// `qp_num` only when given.
inline Napi::Object CompletionObject(Napi::Env env, Keys& keys, double id, double status, double byte_length, double opcode,
                                     double flags, const double* imm, const double* qp_num) {
  constexpr auto kOwn = static_cast<napi_property_attributes>(napi_writable | napi_enumerable | napi_configurable);
  napi_property_descriptor fields[7] = {};
  std::size_t n = 0;
  auto own = [&](Key key, double value) {
    fields[n].name = keys[key];
    fields[n].value = Napi::Number::New(env, value);
    fields[n++].attributes = kOwn;
  };
  own(Key::Id, id);
  own(Key::Status, status);
  own(Key::ByteLength, byte_length);
  own(Key::Opcode, opcode);
  own(Key::Flags, flags);
  if (imm != nullptr) own(Key::Imm, *imm);
  if (qp_num != nullptr) own(Key::QpNum, *qp_num);
  Napi::Object completion = Napi::Object::New(env);
  napi_define_properties(env, completion, n, fields);
  return completion;
}

// out[index] = value, defined (an assignment would run a setter on Array.prototype).
inline void DefineElement(Napi::Env env, Napi::Array out, uint32_t index, Napi::Value value) {
  napi_property_descriptor element{};
  Napi::String name = Napi::String::New(env, std::to_string(index));  // an index: the array's element
  element.name = name;
  element.value = value;
  element.attributes = static_cast<napi_property_attributes>(napi_writable | napi_enumerable | napi_configurable);
  napi_define_properties(env, out, 1, &element);
}

}  // namespace rdma
