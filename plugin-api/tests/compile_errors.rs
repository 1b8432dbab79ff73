//! `#[tool]`'s compile errors: each mistake a plugin author can make fails the build with a
//! message that names the fix (the expected messages are the `.stderr` files in `ui/`).

#[test]
fn tool_attribute_mistakes_fail_the_build_naming_the_fix() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
