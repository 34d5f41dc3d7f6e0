// Calls a function no library defines: linking with --no-undefined fails; forcing the link leaves a library that
// cannot be loaded with RTLD_NOW. Used to test that the builder refuses to publish it.
#include <ms_ext/c_api.h>

extern "C" int function_nobody_defines(int);

extern "C" int UsesMissingSymbol(int nparam, void **, int *, int64_t **, const char **, void *, void *) {
  return function_nobody_defines(nparam);
}
