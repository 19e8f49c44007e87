// Symbol.asyncDispose and Symbol.dispose for runtimes that lack them (Node < 18.18 and
// 20.4, browsers before explicit resource management), so that `await using` compiled by
// TypeScript >= 5.2 finds the method Lease defines. Imported first by every module that uses
// the symbols. `Symbol.for` keeps separate copies of this package (and other libraries doing
// the same) agreeing on one symbol.
const symbols = Symbol as unknown as Record<"asyncDispose" | "dispose", symbol | undefined>;
for (const name of ["asyncDispose", "dispose"] as const) {
  if (typeof symbols[name] !== "symbol") {
    Object.defineProperty(Symbol, name, {
      value: Symbol.for(`Symbol.${name}`),
      writable: false,
      enumerable: false,
      configurable: false,
    });
  }
}

// The same for the types: consumers compiling without lib "esnext.disposable" (or Node's
// types) still read this package's declarations. Declared exactly as @types/node does, which
// merges with TypeScript's own lib.
declare global {
  interface SymbolConstructor {
    readonly dispose: unique symbol;
    readonly asyncDispose: unique symbol;
  }
  interface AsyncDisposable {
    [Symbol.asyncDispose](): PromiseLike<void>;
  }
}

export {};
