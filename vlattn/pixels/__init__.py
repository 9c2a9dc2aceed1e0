"""Region features from pixels: read image files and run a feature extractor over them.

``vlattn features extract`` (:mod:`.extract`) turns a folder of JPEG/PNG files into a feature store of any layout
vlattn writes; ``vlattn caption --images`` and ``vlattn answer --image`` extract on the fly with the extractor a run
was trained on. Extractors (:data:`.registry.EXTRACTORS`):

- ``grid``: a torchvision ResNet's last feature map average-pooled to an N x N grid (boxes = the cells);
- ``regions``: torchvision Faster R-CNN detections (class-wise NMS, 10-100 boxes) with RoIAlign-pooled backbone
  features per box, each box's class and score;
- ``synth``: the synthetic data set's own region CNN over a K x K grid of windows.

torchvision is an optional dependency (``pip install 'vlattn[pixels]'``) needed by ``grid`` and ``regions`` only.
Every store an extractor writes records it (:mod:`.record`: name, weights and their SHA-256, settings), and so does
every checkpoint trained on such a store.
"""
