// Starts Swagger UI on /docs (gate/api/docs.py). A file of its own, not an inline script:
// gate's Content-Security-Policy allows scripts from gate's own origin only.
"use strict";
(function () {
  const root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.openapiUrl,
    dom_id: "#swagger-ui",
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
    deepLinking: true,
    showExtensions: true,
    showCommonExtensions: true,
    // nothing leaves gate: Swagger UI's default would send the schema to an online validator
    validatorUrl: null,
  });
})();
