#include "virtual_test_util.h"
