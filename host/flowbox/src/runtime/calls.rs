//! For the tests of the passes that rewrite the guest (`trim`, `link`, `reach`): a component's
//! exports called, to show that a rewritten component does what the original did.

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, Store};

/// Instantiates `component` and calls each of `functions`, which take nothing and return an
/// s32. The component may import `host`, a function that returns 2.
pub(super) fn call(component: &[u8], functions: &[&str]) -> Vec<i32> {
    let engine = Engine::new(&Config::new()).unwrap();
    let component = Component::new(&engine, component).unwrap();
    let mut store = Store::new(&engine, ());
    let mut linker = Linker::new(&engine);
    linker.root().func_wrap("host", |_, ()| Ok((2,))).unwrap();
    let instance = linker.instantiate(&mut store, &component).unwrap();
    functions
        .iter()
        .map(|name| {
            let function = instance
                .get_typed_func::<(), (i32,)>(&mut store, *name)
                .unwrap();
            function.call(&mut store, ()).unwrap().0
        })
        .collect()
}
