// An enumeration object's value, read through its bytes. A C caller (or a tenant's record) may put
// any integer in an enum-typed argument or field, and loading a C++ enum object that holds none of
// the enumeration's values is undefined behaviour (UBSan's -fsanitize=enum reports it). Whatever
// checks such a value reads it with this, never as its enum type, until the check has passed.
#pragma once

#include <cstring>
#include <type_traits>

namespace phos {

template <typename Enum>
int EnumValue(const Enum& e) {
  static_assert(std::is_enum_v<Enum> && sizeof(int) == sizeof(Enum));
  int value = 0;
  std::memcpy(&value, &e, sizeof value);
  return value;
}

}  // namespace phos
