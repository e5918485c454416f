// What the browser tests' pages share: `window.run(name, ...args)`, which Python calls through
// page.evaluate, runs one scenario and lists its outcome on the page (the screenshot shows it).

/** Expose `scenarios` to Python as `window.run`, then say the page is ready. */
export function exposeScenarios(scenarios) {
  window.run = async (name, ...args) => {
    const row = document.createElement("li");
    document.querySelector("#results").append(row);
    const started = performance.now();
    try {
      const result = await scenarios[name](...args);
      row.textContent = `${name}: ok in ${Math.round(performance.now() - started)} ms `
        + JSON.stringify(result).slice(0, 160);
      return result;
    } catch (error) {
      row.className = "failed";
      row.textContent = `${name}: ${error}`;
      throw error;
    }
  };
  window.ready = true;
}
