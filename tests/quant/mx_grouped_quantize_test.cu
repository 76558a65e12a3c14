// Placeholder: the tests of this file land with its kernel.
#include <gtest/gtest.h>
