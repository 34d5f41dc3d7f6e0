#include <ms_ext/ms_ext.h>

MS_EXT_KERNEL(Broken, ms_ext::Signature().inputs(1).outputs(1)) {
  int x = ;  // deliberate syntax error on line 4
}
