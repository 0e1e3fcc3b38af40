#include <cstdio>
#include <cstring>

#include <my_lib.hpp>

int main() {
  const std::string d = my::describe();
  if (std::strcmp(my::slm_version(), slm::version_string) != 0) return 1;
  std::printf("%s\n", d.c_str());
  return 0;
}
